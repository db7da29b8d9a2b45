"""What a path on the command line names: ``LABEL=PATH``, a run folder's logs, a sweep's rows,
and which checkpoint a model argument of ``kl``, ``unseen`` and ``mc-eval`` stands for.

A checkpoint file is itself. A run folder is its ``checkpoint_best.pt``, or with ``--match-ppl``
the epoch checkpoint (``checkpoint<N>.pt``) whose epoch's validation perplexity, as its fairseq
log says, is nearest the target: the paper's Table 6 compares models of near-identical overall
perplexity (docs/analysis.md). ``--match-ppl auto`` takes the lowest perplexity that every folder
has a checkpoint at or above: the best epoch of the folder that did worst.
"""

import argparse
import glob
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ...analysis import logs
from ...errors import NoisingError
from ...sweep import record


def split_label(arg: str) -> Tuple[Optional[str], str]:
    """``LABEL=PATH`` -> (LABEL, PATH); a plain PATH -> (None, PATH)."""
    if "=" in arg and not os.path.exists(arg):
        label, path = arg.split("=", 1)
        return label, path
    return None, arg


def find_logs(directory: str) -> List[str]:
    """The ``*.log`` and ``*.txt`` files of a run directory, sorted."""
    found = glob.glob(os.path.join(directory, "*.log")) + glob.glob(
        os.path.join(directory, "*.txt")
    )
    return [f for f in sorted(found) if os.path.isfile(f)]


def expand_sweeps(args: List[str]) -> List[str]:
    """Each unlabelled sweep folder (no row itself, rows in its sub-folders) as its rows'
    folders, in order; every other argument as it is."""
    out = []
    for arg in args:
        label, path = split_label(arg)
        rows = []
        if label is None and os.path.isdir(path) and record.read(path) is None:
            rows = [r["run_dir"] for r in record.read_sweep(path)]
        out += rows or [arg]
    return out


_EPOCH_CHECKPOINT = re.compile(r"checkpoint(\d+)\.pt$")
NO_EPOCHS = "train it without --no-epoch-checkpoints (Hydra: checkpoint.no_epoch_checkpoints=false)"


@dataclass
class Pick:
    label: Optional[str]
    path: str  # the checkpoint file
    epoch: Optional[int] = None  # with --match-ppl: the epoch chosen
    logged_ppl: Optional[float] = None  # and its validation perplexity in the log


def match_ppl(value: str) -> str:
    """--match-ppl's argparse type: a perplexity above 1, or ``auto``."""
    if value != "auto":
        try:
            ok = float(value) > 1
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(
                f"expected a perplexity above 1 or 'auto', got {value!r}"
            )
    return value


def epoch_checkpoints(folder: str) -> Dict[int, str]:
    """{epoch: path} of the ``checkpoint<N>.pt`` files in ``folder``."""
    found = (_EPOCH_CHECKPOINT.match(name) for name in os.listdir(folder))
    return {int(m.group(1)): os.path.join(folder, m.group(0)) for m in found if m}


def logged_valid_ppl(folder: str, subset: str = "valid") -> Dict[int, float]:
    """{epoch: validation perplexity} from the fairseq logs in ``folder`` (``*.log``, ``*.txt``);
    a later log's figure for an epoch replaces an earlier one's."""
    ppl: Dict[int, float] = {}
    for path in find_logs(folder):
        ppl.update(logs.read_log(path, subset=subset).valid_ppl)
    return ppl


def candidates(folder: str) -> Dict[int, float]:
    """{epoch: logged validation perplexity} of the folder's epochs that have a checkpoint."""
    saved = epoch_checkpoints(folder)
    if not saved:
        raise NoisingError(f"--match-ppl: {folder} holds no checkpoint<N>.pt: {NO_EPOCHS}")
    ppl = logged_valid_ppl(folder)
    both = {e: ppl[e] for e in saved if e in ppl}
    if not both:
        raise NoisingError(
            f"--match-ppl: {folder} holds no fairseq log (*.log, *.txt) with the validation "
            f"perplexity of epochs {min(saved)}-{max(saved)} (fairseq-train --log-file FILE keeps one)"
        )
    return both


def nearest_epoch(ppl: Dict[int, float], target: float) -> int:
    """The epoch whose perplexity is nearest ``target`` (the earlier of two as near)."""
    return min(ppl, key=lambda e: (abs(ppl[e] - target), e))


def resolve(args_checkpoints: List[str], match: Optional[str]) -> tuple:
    """([Pick], the target perplexity or None) of the model arguments."""
    parsed = [split_label(a) for a in args_checkpoints]
    for _, path in parsed:
        if not os.path.exists(path):
            raise NoisingError(f"checkpoint {path} does not exist")
        if match is not None and not os.path.isdir(path):
            raise NoisingError(
                f"--match-ppl picks among a run folder's epoch checkpoints: {path} is a file "
                "(name its folder)"
            )
    if match is None:
        picks = []
        for label, path in parsed:
            if os.path.isdir(path):
                path = os.path.join(path, "checkpoint_best.pt")
                if not os.path.isfile(path):
                    raise NoisingError(f"{os.path.dirname(path)} holds no checkpoint_best.pt")
            picks.append(Pick(label, path))
        return picks, None
    found = [candidates(path) for _, path in parsed]
    target = max(min(c.values()) for c in found) if match == "auto" else float(match)
    picks = []
    for (label, path), ppl in zip(parsed, found):
        epoch = nearest_epoch(ppl, target)
        picks.append(Pick(label, epoch_checkpoints(path)[epoch], epoch, ppl[epoch]))
    return picks, target
