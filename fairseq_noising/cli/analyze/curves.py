"""``fairseq-noise-analyze curves``: training and validation perplexity per epoch (Figure 1)."""

import os
from typing import Dict

from ...analysis import logs, plots
from ...analysis.logs import lowered_at
from ...errors import NoisingError
from ...sweep import record
from .arguments import expand_sweeps, find_logs, split_label
from .common import add_output_args, draw, print_table


def add_parser(sub):
    p = sub.add_parser("curves", help="training and validation perplexity per epoch (Figure 1)")
    p.add_argument(
        "logs",
        nargs="+",
        metavar="RUN",
        help="a sweep row's folder (or a sweep's folder: its rows), or a fairseq training log "
        "([LABEL=]PATH)",
    )
    p.add_argument("--valid-subset", default="valid", help="for logs: the validation subset")
    add_output_args(p)
    p.set_defaults(run=run)


def read_run(arg: str, valid_subset: str) -> tuple:
    """(label, {"path", "scheme", "gamma", "train_ppl", "valid_ppl", "lr"}) of one ``[LABEL=]PATH``: a
    sweep row (its record: the row's scheme and gamma_0 label it), or a log (labelled by its
    name)."""
    label, path = split_label(arg)
    row = record.read(path) if os.path.isdir(path) else None
    if row is not None and row["status"] != "unreadable":
        t = row["training"]
        series = [
            {int(e): p for e, p in t[k].items() if p is not None}
            for k in ("train_ppl", "valid_ppl", "train_lr")
        ]
        run = dict(path=path, scheme=row["key"], gamma=row["gamma"])
        label = label or f"{row['name']} ({row['key']} {row['gamma']:g})"
    else:
        name = None
        if os.path.isdir(path):
            found = find_logs(path)
            if not found:
                raise NoisingError(f"{path} holds no *.log file and no sweep row")
            name, path = os.path.basename(os.path.normpath(path)), found[0]
        if not os.path.isfile(path):
            raise NoisingError(f"{path} does not exist")
        log = logs.read_log(path, subset=valid_subset)
        series = [log.train_ppl, log.valid_ppl, log.lr]
        run = dict(path=path, scheme=None, gamma=None)
        label = label or name or os.path.splitext(os.path.basename(path))[0]
    if not any(series[:2]):
        raise NoisingError(f"{path} holds no end-of-epoch perplexity")
    run.update(train_ppl=series[0], valid_ppl=series[1], lr=series[2])
    run["best_valid_ppl"] = min(series[1].values()) if series[1] else None
    return label, run


def _rate(lr) -> str:
    return "-" if lr is None else f"{lr:g}"


def run(args) -> Dict:
    runs = dict(read_run(arg, args.valid_subset) for arg in expand_sweeps(args.logs))
    rows = [
        [label, e, r["train_ppl"].get(e), r["valid_ppl"].get(e), _rate(r["lr"].get(e))]
        for label, r in runs.items()
        for e in sorted(set(r["train_ppl"]) | set(r["valid_ppl"]))
    ]
    print_table(["run", "epoch", "train ppl", "valid ppl", "lr"], rows)
    curves = {k: (r["train_ppl"], r["valid_ppl"]) for k, r in runs.items()}
    draw(args, plots.curves, curves, halved={k: lowered_at(r["lr"]) for k, r in runs.items()})
    return {"runs": runs}
