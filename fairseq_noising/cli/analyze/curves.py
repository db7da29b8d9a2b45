"""``fairseq-noise-analyze curves``: training and validation perplexity per epoch (Figure 1)."""

import os
from typing import Dict

from ...analysis import logs, plots
from ...errors import NoisingError
from .common import add_output_args, draw, find_logs, print_table, split_label


def add_parser(sub):
    p = sub.add_parser("curves", help="training and validation perplexity per epoch (Figure 1)")
    p.add_argument("logs", nargs="+", metavar="LOG", help="fairseq training logs ([LABEL=]PATH)")
    p.add_argument("--valid-subset", default="valid")
    add_output_args(p)
    p.set_defaults(run=run)


def read_run(arg: str, valid_subset: str):
    """(label, RunLog) of one ``[LABEL=]PATH`` argument, a log or a run directory."""
    label, path = split_label(arg)
    name = None
    if os.path.isdir(path):
        found = find_logs(path)
        if not found:
            raise NoisingError(f"{path} holds no *.log file")
        name = os.path.basename(os.path.normpath(path))
        path = found[0]
    if not os.path.isfile(path):
        raise NoisingError(f"{path} does not exist")
    run = logs.read_log(path, subset=valid_subset)
    if not run.train_ppl and not run.valid_ppl:
        raise NoisingError(f"{path} holds no end-of-epoch perplexity")
    if label is None:
        label = name or os.path.splitext(os.path.basename(path))[0]
        if run.noise_scheme:
            label += f" ({run.noise_scheme} {run.noise_gamma:g})"
    return label, run


def run(args) -> Dict:
    runs = dict(read_run(arg, args.valid_subset) for arg in args.logs)
    rows = [
        [label, e, run.train_ppl.get(e), run.valid_ppl.get(e)]
        for label, run in runs.items()
        for e in sorted(set(run.train_ppl) | set(run.valid_ppl))
    ]
    print_table(["run", "epoch", "train ppl", "valid ppl"], rows)
    draw(args, plots.curves, {k: (r.train_ppl, r.valid_ppl) for k, r in runs.items()})
    return {
        "runs": {
            k: {
                "path": r.path,
                "scheme": r.noise_scheme,
                "gamma": r.noise_gamma,
                "train_ppl": r.train_ppl,
                "valid_ppl": r.valid_ppl,
                "best_valid_ppl": r.best_valid_ppl,
            }
            for k, r in runs.items()
        }
    }
