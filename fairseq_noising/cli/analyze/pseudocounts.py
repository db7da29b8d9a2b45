"""``fairseq-noise-analyze pseudocounts``: noised bigram counts against Section 3.3."""

import time
from typing import Dict

import numpy as np

from ...analysis import plots, pseudocounts
from ...errors import NoisingError
from .common import add_output_args, draw, print_table


def add_parser(sub):
    p = sub.add_parser("pseudocounts", help="empirical noised bigram counts against Section 3.3")
    p.add_argument("data", metavar="DATA")
    p.add_argument("--draws", type=int, default=20, help="independent noisings (epochs 1..N)")
    p.add_argument(
        "--min-expected",
        type=float,
        default=20.0,
        help="compare the cells whose expected count is at least this",
    )
    p.add_argument("--top", type=int, default=5, help="show the N largest deviations")
    add_output_args(p)
    p.set_defaults(run=run, takes_task_options=True)


def load_noised_split(args):
    """The task and the noised training split of ``DATA [task options]``, as fairseq-train has them."""
    from ...data.noised_dataset import NoisedDataset
    from .. import preview

    pargs = preview.parse_args([args.data] + args.task_argv)
    if pargs.task != "noised_language_modeling":
        raise NoisingError("pseudocounts supports --task noised_language_modeling only")
    if pargs.noise_scheme == "none":
        raise NoisingError("pseudocounts needs a noising scheme (--noise-scheme)")
    if args.draws < 1:
        raise NoisingError(f"--draws must be at least 1, got {args.draws}")
    task, wrapper = preview.load_task(pargs)
    if not isinstance(wrapper, NoisedDataset):
        raise NoisingError(f"split {pargs.split} is not noised")
    return pargs.split, task, wrapper


def clean_batches(dataset):
    """The dataset collated in order (one item at a time when its items are whole batches)."""
    from ...data.stateful_bptt_dataset import StatefulBPTTDataset

    per = 1 if isinstance(dataset, StatefulBPTTDataset) else 64
    batches = (
        dataset.collater([dataset[i] for i in range(s, min(s + per, len(dataset)))])
        for s in range(0, len(dataset), per)
    )
    return [b for b in batches if b]


def pair_counts(batches, pad, v):
    """(sorted keys, counts) of the (context, target) pairs at the real targets of ``batches``."""
    parts = []
    for b in batches:
        real = (b["target"] != pad).numpy()
        context, target = b["net_input"]["src_tokens"].numpy(), b["target"].numpy()
        parts.append(pseudocounts.pair_counts(context[real], target[real], v))
    return pseudocounts.merge_counts(parts)


def compare_counts(args, task, wrapper) -> Dict:
    """Observed noised pair counts over ``--draws`` epochs against their exact expectation."""
    scheme = wrapper.noisers["target"].scheme
    pad, v = task.dictionary.pad(), len(task.dictionary)
    batches = clean_batches(wrapper.dataset)
    clean_keys, clean_counts = pair_counts(batches, pad, v)
    start = time.perf_counter()
    noised = [
        pair_counts((wrapper.noise_batch(b, epoch=epoch)[0] for b in batches), pad, v)
        for epoch in range(1, args.draws + 1)
    ]
    noised_keys, noised_counts = pseudocounts.merge_counts(noised)
    seconds = time.perf_counter() - start

    proposal = scheme.proposal
    if proposal is None:  # blank
        proposal = np.zeros(v)
        proposal[scheme.blank_index] = 1.0
    ordinary = np.ones(v, dtype=bool)
    ordinary[list(scheme.special_ids)] = False
    expected_fn = pseudocounts.ExpectedCounts(
        clean_keys, clean_counts, scheme.gamma, proposal, ordinary, scheme.noise_target
    )
    cells = np.union1d(clean_keys, noised_keys)
    expected = expected_fn(cells)
    observed = pseudocounts.lookup(noised_keys, noised_counts, cells) / args.draws
    keep, rel, z = pseudocounts.compare(expected, observed, args.draws, args.min_expected)
    if not keep.any():
        raise NoisingError(
            f"no bigram has an expected pseudocount >= --min-expected {args.min_expected}"
        )
    worst = np.flatnonzero(keep)[np.argsort(-rel[keep])[: args.top]]
    clean_of_worst = pseudocounts.lookup(clean_keys, clean_counts, cells[worst])
    sym = task.dictionary.symbols
    result = {
        "scheme": str(scheme.name),
        "gamma": scheme.gamma0,
        "draws": args.draws,
        "positions": int(clean_counts.sum()),
        "cells_compared": int(keep.sum()),
        "min_expected": args.min_expected,
        "max_relative_deviation": float(rel[keep].max()),
        "max_abs_z": float(np.abs(z[keep]).max()),
        "mean_relative_deviation": float(rel[keep].mean()),
        "noised_positions_total": int(noised_counts.sum()),
        "seconds": seconds,
        "worst": [
            {
                "context": sym[cells[i] // v],
                "target": sym[cells[i] % v],
                "clean": float(c),
                "expected": float(expected[i]),
                "observed": float(observed[i]),
                "relative_deviation": float(rel[i]),
                "z": float(z[i]),
            }
            for i, c in zip(worst, clean_of_worst)
        ],
    }
    if scheme.name == "unigram":
        interp = expected_fn.interpolation(cells, scheme.gamma0)
        k_rel = np.abs(observed - interp) / np.where(interp > 0, interp, 1.0)
        result["interpolation_max_relative_deviation"] = float(
            k_rel[interp >= args.min_expected].max()
        )
        result["interpolation_vs_exact_max_abs"] = float(np.abs(interp - expected).max())
    return result, expected[keep], observed[keep]


def run(args) -> Dict:
    split, task, wrapper = load_noised_split(args)
    result, expected, observed = compare_counts(args, task, wrapper)
    name, gamma0 = result["scheme"], result["gamma"]
    print(
        f"bigram pseudocounts of {split} noised with {name}, gamma_0={gamma0:g}: "
        f"{args.draws} independent draws (epochs 1..{args.draws}) of {result['positions']} positions"
    )
    print(
        f"cells with expected count >= {args.min_expected:g}: {result['cells_compared']}; "
        f"largest relative deviation {result['max_relative_deviation']:.4f} (mean "
        f"{result['mean_relative_deviation']:.4f}); largest |z| {result['max_abs_z']:.2f}"
    )
    if "interpolation_max_relative_deviation" in result:
        print(
            f"Section 3.3 formula (1-g) c(a,b) + g p(a) c'(b): largest relative deviation "
            f"{result['interpolation_max_relative_deviation']:.4f}"
        )
    print_table(
        ["context", "target", "clean", "expected", "observed", "rel. dev.", "z"],
        [
            [
                w["context"],
                w["target"],
                w["clean"],
                w["expected"],
                w["observed"],
                f"{w['relative_deviation']:.4f}",
                w["z"],
            ]
            for w in result["worst"]
        ],
    )
    title = f"{name} gamma_0={gamma0:g}, {args.draws} draws"
    draw(args, plots.pseudocount_scatter, expected, observed, title=title)
    return result
