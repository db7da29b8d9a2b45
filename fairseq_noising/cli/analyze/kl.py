"""``fairseq-noise-analyze kl``: mean KL to the uniform and unigram distributions (Figure 3)."""

from typing import Dict

import numpy as np
import torch

from ...analysis import divergence, plots
from .common import add_model_parser, draw, print_table, score_models, series


def add_parser(sub):
    add_model_parser(sub, "kl", "mean KL to the uniform and unigram distributions (Figure 3)", run)


def score(label, m, split) -> Dict:
    from ...scoring import target_log_probs

    stats = m.train_stats()
    support = divergence.real_vocabulary(stats.unigram)
    log_u, log_q = (
        torch.from_numpy(a).to(m.device)
        for a in divergence.reference_log_probs(stats.unigram, support)
    )
    sup = torch.from_numpy(np.flatnonzero(support)).to(m.device)
    n, nll, kl_u, kl_q, outside = 0, 0.0, 0.0, 0.0, 0.0
    for b, lprobs in m.scored_batches(split, desc=f"kl {label}"):
        rows = lprobs[b.mask]
        ku, out_mass = divergence.kl_on_support(rows, sup, log_u)
        kq, _ = divergence.kl_on_support(rows, sup, log_q)
        n += int(b.mask.sum())
        nll -= float(target_log_probs(lprobs, b.sample["target"])[b.mask].double().sum())
        kl_u += float(ku.sum())
        kl_q += float(kq.sum())
        outside += float(out_mass.sum())
    return {
        "label": label,
        "checkpoint": m.path,
        "scheme": m.scheme,
        "gamma": m.gamma,
        "stateful": m.stateful,
        "positions": n,
        "ppl": divergence.perplexity(nll, n),
        "kl_uniform": kl_u / n,
        "kl_unigram": kl_q / n,
        "mass_outside_vocab": outside / n,
        "vocab_size": int(support.sum()),
    }


def run(args) -> Dict:
    results, matched = score_models(args, lambda label, m: score(label, m, args.split))
    print(
        f"mean KL divergence D(p_R || q) in nats over the {args.split} split; R = the "
        f"{results[0]['vocab_size']} types seen in training, p renormalised on R"
    )
    print_table(
        ["model", "positions", "ppl", "KL uniform", "KL unigram", "mass outside R"],
        [
            [
                r["label"],
                r["positions"],
                r["ppl"],
                f"{r['kl_uniform']:.4f}",
                f"{r['kl_unigram']:.4f}",
                f"{r['mass_outside_vocab']:.2e}",
            ]
            for r in results
        ],
    )
    draw(args, plots.kl_bars, *series(results, "label", "kl_uniform", "kl_unigram"))
    return {"split": args.split, **matched, "models": results}
