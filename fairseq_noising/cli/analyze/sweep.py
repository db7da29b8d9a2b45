"""``fairseq-noise-analyze sweep``: best validation perplexity against gamma_0 (Figure 2)."""

import os
import re
from typing import Dict, List

from ...analysis import logs, plots
from ...errors import NoisingError
from .common import add_output_args, draw, find_logs, print_table, split_label

SCHEME_GAMMA = re.compile(r"^([A-Za-z_]+):([0-9.eE+-]+)$")


def add_parser(sub):
    p = sub.add_parser("sweep", help="best validation perplexity against gamma_0 (Figure 2)")
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="fairseq log, checkpoint_best.pt or run directory; [SCHEME:GAMMA=]PATH",
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
    """(scheme, gamma, best valid ppl) of a fairseq training log (scheme None if not logged)."""
    run = logs.read_log(path)
    if run.best_valid_ppl is None:
        raise NoisingError(f"{path} holds no \"valid on 'valid' subset\" line")
    return run.noise_scheme, run.noise_gamma, run.best_valid_ppl


def sweep_point(arg: str) -> Dict:
    """(scheme, gamma, best valid ppl) of one run: a log, a checkpoint or a run directory."""
    label, path = split_label(arg)
    scheme = gamma = None
    named = SCHEME_GAMMA.match(label) if label else None
    if named:
        scheme, gamma = named.group(1), float(named.group(2))
    if os.path.isdir(path):
        found = find_logs(path)
        best_ckpt = os.path.join(path, "checkpoint_best.pt")
        if found:
            path = found[0]
        elif os.path.isfile(best_ckpt):
            path = best_ckpt
        else:
            raise NoisingError(f"{path} holds no *.log file nor checkpoint_best.pt")
    if not os.path.isfile(path):
        raise NoisingError(f"{path} does not exist")
    source = "checkpoint" if path.endswith(".pt") else "log"
    stored_scheme, stored_gamma, ppl = (_from_checkpoint if source == "checkpoint" else _from_log)(
        path
    )
    scheme = scheme or stored_scheme
    gamma = gamma if gamma is not None else stored_gamma
    if scheme is None or gamma is None:
        raise NoisingError(
            f"{path} does not say its noising scheme; pass it as SCHEME:GAMMA={path}"
        )
    return {"path": path, "scheme": scheme, "gamma": gamma, "best_valid_ppl": ppl, "source": source}


def run(args) -> Dict:
    points = sorted((sweep_point(a) for a in args.runs), key=lambda p: (p["scheme"], p["gamma"]))
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
