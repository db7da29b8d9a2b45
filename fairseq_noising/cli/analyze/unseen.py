"""``fairseq-noise-analyze unseen``: perplexity on unseen bigrams and trigrams (Table 6)."""

import os
from typing import Dict

import numpy as np

from ...analysis import divergence, ngrams, plots
from .common import add_model_parser, draw, print_table, score_models, series


def add_parser(sub):
    add_model_parser(sub, "unseen", "perplexity on unseen bigrams and trigrams (Table 6)", run)


def score(label, m, split) -> Dict:
    from ...scoring import target_log_probs

    index = ngrams.NgramIndex(
        m.stream(os.path.basename(m.train_prefix)), len(m.dictionary), m.dictionary.eos()
    )
    unseen_bi, unseen_tri, tri_defined = index.unseen(m.stream(split))
    selections = {"all": None, "bigram": unseen_bi, "trigram": unseen_tri & tri_defined}
    acc = {k: [0, 0.0] for k in selections}
    for b, lprobs in m.scored_batches(split, desc=f"unseen {label}"):
        nll = -target_log_probs(lprobs, b.sample["target"]).double().cpu().numpy()
        real = b.positions >= 0
        pos, nll = b.positions[real], nll[real]
        for key, unseen in selections.items():
            sel = np.ones(pos.shape, dtype=bool) if unseen is None else unseen[pos]
            acc[key][0] += int(sel.sum())
            acc[key][1] += float(nll[sel].sum())
    r = {
        "label": label,
        "checkpoint": m.path,
        "scheme": m.scheme,
        "gamma": m.gamma,
        "stateful": m.stateful,
    }
    for key, (count, total) in acc.items():
        r[f"{key}_positions"] = count
        r[f"{key}_ppl"] = divergence.perplexity(total, count)
    return r


def run(args) -> Dict:
    results, matched = score_models(args, lambda label, m: score(label, m, args.split))
    print(
        f"perplexity of the last token at positions of the {args.split} split whose bigram / "
        "trigram never occurs in the training data"
    )
    print_table(
        [
            "model",
            "ppl (all)",
            "positions",
            "unseen bigrams",
            "positions",
            "unseen trigrams",
            "positions",
        ],
        [
            [
                r["label"],
                r["all_ppl"],
                r["all_positions"],
                r["bigram_ppl"],
                r["bigram_positions"],
                r["trigram_ppl"],
                r["trigram_positions"],
            ]
            for r in results
        ],
    )
    draw(args, plots.unseen_bars, *series(results, "label", "bigram_ppl", "trigram_ppl"))
    return {"split": args.split, **matched, "models": results}
