"""``fairseq-noise-analyze mc-eval``: test-time Monte Carlo over noised contexts."""

import time
from typing import Dict

import torch

from ...analysis import divergence
from ...errors import NoisingError
from ...schemes import check_gamma
from .common import add_model_args, add_output_args, print_table, score_models


def add_parser(sub):
    p = sub.add_parser("mc-eval", help="test-time Monte Carlo over noised contexts")
    add_model_args(p, split_default="test")
    p.add_argument("--samples", "-K", type=int, default=10, help="noised copies per context (K)")
    p.add_argument("--noise-scheme", default=None, help="scheme (default: the checkpoint's)")
    p.add_argument(
        "--noise-gamma", type=float, default=None, help="gamma_0 (default: the checkpoint's)"
    )
    add_output_args(p, png=False)
    p.set_defaults(run=run)


def timed_nll(m, split, desc, samples, noiser=None):
    """(positions, summed -log p, seconds) of the split.

    With a noiser, the mean probability over ``samples`` noised copies of every context (each
    copy its own stream of states when stateful; targets clean). The seconds count the model's
    work per batch (noising, forward passes, scoring), not the data loading.
    """
    from ...noiser import positions_in_example
    from ...scoring import target_log_probs
    from ..model_io import sync

    n, nll, seconds, states = 0, 0.0, 0.0, [None] * samples
    for b in m.batches(split, desc=desc):
        sync(m.device)
        start = time.perf_counter()
        net = b.sample["net_input"]
        if noiser is None:
            contexts = [net["src_tokens"]]
        else:
            src = net["src_tokens"].cpu().numpy()
            ids = b.sample["id"].cpu().numpy()
            where = positions_in_example(src, m.pad)
            contexts = [
                torch.from_numpy(noiser(src, None, ids, where, epoch=k + 1).context).to(m.device)
                for k in range(samples)
            ]
        per_sample = []
        for k, tokens in enumerate(contexts):
            lprobs, states[k] = m.log_probs(tokens, net["src_lengths"], states[k])
            per_sample.append(target_log_probs(lprobs, b.sample["target"]).double())
        averaged = divergence.log_mean_exp(torch.stack(per_sample), dim=0)
        nll -= float(averaged[b.mask].sum())
        n += int(b.mask.sum())
        sync(m.device)
        seconds += time.perf_counter() - start
    return n, nll, seconds


def score(label, m, args) -> Dict:
    noiser = m.noiser(args.noise_scheme, args.noise_gamma)
    scheme = noiser.scheme
    # one warm-up forward pass before the clock starts
    m.log_probs(
        torch.full((1, 2), m.dictionary.eos(), device=m.device),
        torch.full((1,), 2, device=m.device),
    )
    n, nll, plain_s = timed_nll(m, args.split, f"plain {label}", 1)
    mc_n, mc_nll, mc_s = timed_nll(
        m, args.split, f"mc K={args.samples} {label}", args.samples, noiser
    )
    return {
        "label": label,
        "checkpoint": m.path,
        "trained_scheme": m.scheme,
        "trained_gamma": m.gamma,
        "test_scheme": str(scheme.name),
        "test_gamma": scheme.gamma0,
        "samples": args.samples,
        "stateful": m.stateful,
        "positions": n,
        "ppl": divergence.perplexity(nll, n),
        "mc_ppl": divergence.perplexity(mc_nll, mc_n),
        "plain_seconds": plain_s,
        "mc_seconds": mc_s,
        "cost_ratio": mc_s / plain_s if plain_s > 0 else float("nan"),
    }


def run(args) -> Dict:
    if args.samples < 1:
        raise NoisingError(f"--samples must be at least 1, got {args.samples}")
    check_gamma(args.noise_gamma, "--noise-gamma")
    results, matched = score_models(args, lambda label, m: score(label, m, args))
    print(f"test-time Monte Carlo over noised contexts ({args.split} split, targets not noised)")
    print_table(
        ["model", "noise", "K", "positions", "ppl", "MC ppl", "plain s", "MC s", "cost x"],
        [
            [
                r["label"],
                f"{r['test_scheme']} {r['test_gamma']:g}",
                r["samples"],
                r["positions"],
                r["ppl"],
                r["mc_ppl"],
                r["plain_seconds"],
                r["mc_seconds"],
                r["cost_ratio"],
            ]
            for r in results
        ],
    )
    return {"split": args.split, **matched, "models": results}
