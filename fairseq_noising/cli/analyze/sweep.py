"""``fairseq-noise-analyze sweep``: best validation perplexity against gamma_0 (Figure 2)."""

import os
import re
from typing import Dict, List

from ...analysis import logs, plots
from ...errors import NoisingError
from ...sweep import record
from .arguments import expand_sweeps, find_logs, split_label
from .common import add_output_args, draw, print_table

SCHEME_GAMMA = re.compile(r"^([A-Za-z_]+):([0-9.eE+-]+)$")


def add_parser(sub):
    p = sub.add_parser("sweep", help="best validation perplexity against gamma_0 (Figure 2)")
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="a sweep row's folder (or a sweep's folder: its rows), a checkpoint_best.pt, a run "
        "folder or a fairseq log (a log is named SCHEME:GAMMA=PATH)",
    )
    add_output_args(p)
    p.set_defaults(run=run)


def _from_checkpoint(path: str):
    """(scheme, gamma, best valid ppl) stored in a checkpoint."""
    from fairseq import checkpoint_utils

    from ...checkpoint_safety import allow_fairseq_checkpoints

    allow_fairseq_checkpoints()  # torch.load in fairseq is weights_only from torch 2.6 on
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    cfg, extra = state["cfg"], state.get("extra_state") or {}
    best = extra.get("best", extra.get("val_loss"))
    if best is None:
        raise NoisingError(f"{path} records no validation score")
    ppl = logs.ppl_from_best(float(best), cfg.checkpoint.best_checkpoint_metric)
    return str(cfg.task.noise_scheme), float(cfg.task.noise_gamma), ppl


def _from_log(path: str):
    """(None, None, best valid ppl) of a fairseq training log: a log does not say its scheme."""
    best = logs.read_log(path).best_valid_ppl
    if best is None:
        raise NoisingError(f"{path} holds no validation perplexity")
    return None, None, best


def _from_row(row: Dict):
    """(scheme key, gamma, valid ppl) of a sweep row: its evaluation, else fairseq's best."""
    valid = (row.get("evaluation") or {}).get("valid_ppl")
    if valid is None:
        seen = [p for p in row["training"]["valid_ppl"].values() if p is not None]
        if not seen:
            raise NoisingError(f"{row['run_dir']}: the row has no validation yet")
        valid = min(seen)
    return row["key"], row["gamma"], valid


def sweep_point(arg: str) -> Dict:
    """(scheme, gamma, best valid ppl) of one run: a sweep row, a checkpoint, a run folder (its
    checkpoint_best.pt, else its log) or a log."""
    label, path = split_label(arg)
    scheme = gamma = None
    named = SCHEME_GAMMA.match(label) if label else None
    if named:
        scheme, gamma = named.group(1), float(named.group(2))
    row = record.read(path) if os.path.isdir(path) else None
    if row is not None and row["status"] != "unreadable":
        source, (stored_scheme, stored_gamma, ppl) = "row", _from_row(row)
    else:
        if os.path.isdir(path):
            best_ckpt = os.path.join(path, "checkpoint_best.pt")
            found = find_logs(path)
            if os.path.isfile(best_ckpt):
                path = best_ckpt
            elif found:
                path = found[0]
            else:
                raise NoisingError(f"{path} holds no sweep row, checkpoint_best.pt nor *.log file")
        if not os.path.isfile(path):
            raise NoisingError(f"{path} does not exist")
        source = "checkpoint" if path.endswith(".pt") else "log"
        read = _from_checkpoint if source == "checkpoint" else _from_log
        stored_scheme, stored_gamma, ppl = read(path)
    scheme = scheme or stored_scheme
    gamma = gamma if gamma is not None else stored_gamma
    if scheme is None or gamma is None:
        raise NoisingError(f"a log does not say its noising scheme: pass it as SCHEME:GAMMA={path}")
    return {"path": path, "scheme": scheme, "gamma": gamma, "best_valid_ppl": ppl, "source": source}


def run(args) -> Dict:
    points = sorted(
        (sweep_point(a) for a in expand_sweeps(args.runs)), key=lambda p: (p["scheme"], p["gamma"])
    )
    print_table(
        ["scheme", "gamma_0", "best valid ppl", "from", "run"],
        [
            [p["scheme"], f"{p['gamma']:g}", p["best_valid_ppl"], p["source"], p["path"]]
            for p in points
        ],
    )
    series: Dict[str, List] = {}
    for p in points:
        series.setdefault(p["scheme"], []).append((p["gamma"], p["best_valid_ppl"]))
    draw(args, plots.sweep_lines, series)
    return {"points": points}
