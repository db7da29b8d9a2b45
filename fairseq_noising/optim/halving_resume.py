"""What a resumed ``--lr-scheduler paper_halving`` reads from the checkpoint files, on rank 0: the
validation saved with the checkpoint being loaded (fairseq saves before the scheduler decides it),
and the best epoch's parameters from checkpoint_best.pt (docs/paper_halving.md, "Resuming")."""

import dataclasses
import logging

from fairseq_noising import fairseq_compat
from fairseq_noising.optim import halving_rule as rule
from fairseq_noising.optim.best_params import read_best_checkpoint, read_checkpoint

logger = logging.getLogger(__name__)


def read_checkpoints(scheduler, epoch) -> dict:
    """``pending``: the validation saved with the checkpoint being loaded, if undecided; ``best``:
    the best validation whose parameters are read from checkpoint_best.pt at ``path`` (None:
    none), with ``tensors`` or ``error``."""
    cfg, updates = scheduler.cfg, scheduler.num_updates
    path, best_path = fairseq_compat.checkpoint_files(cfg.checkpoint, cfg.distributed_training)
    loaded, problem = read_checkpoint(path)
    position = fairseq_compat.checkpoint_position(loaded or {})
    if loaded is not None and position["updates"] != updates:
        problem = f"holds {position['where']}, not epoch {epoch} at {updates} updates"
        loaded = None
    if loaded is None:
        logger.warning(
            f"paper_halving: {path} {problem}: it is not the checkpoint being loaded; a "
            "validation saved with that one before its decision is not replayed"
        )
    pending = _pending_validation(scheduler, position) if loaded is not None else None
    found = dict(pending=pending, best=_best_to_read_back(scheduler, pending), path=best_path)
    if found["best"] is not None and loaded is None:
        found["error"] = f"cannot be mapped onto the model without it ({path} {problem})"
    elif found["best"] is not None:
        found.update(read_best_checkpoint(best_path, scheduler.optimizer, loaded, found["best"]))
    return found


def _pending_validation(scheduler, position):
    """The validation saved with the checkpoint (at ``position``) if no decision took it: an
    epoch's (fairseq saves before it calls step), or one inside an epoch (--stop-time-hours,
    --max-update) where checkpoint_best.pt holds the best."""
    if position["loss"] is None or position["epoch"] is None:
        return None
    v, seen = (
        {k: position[k] for k in ("epoch", "loss", "updates", "inside")},
        scheduler.validations,
    )
    if not v["inside"]:
        done = any(not u["inside"] and u["epoch"] >= v["epoch"] for u in seen)
    else:
        done = any(u["inside"] and u["updates"] == v["updates"] for u in seen)
        done |= scheduler.best_updates is None or not scheduler.best_copy.to_read_back
    return None if done else v


def _best_to_read_back(scheduler, pending):
    """The best validation whose parameters come from checkpoint_best.pt: none with a kept copy,
    or where the best is the pending validation (decided on a copy of the progress)."""
    if not scheduler.best_copy.to_read_back:
        return None
    progress, ahead = dataclasses.replace(scheduler.progress), None
    if pending is not None:
        ahead = dict(pending)
        rule.decide(progress, ahead, scheduler.cfg)
    best = progress.best
    if best is not None and best is not ahead and best["updates"] is None:
        logger.warning(  # version 1, written with --no-restore-best
            "paper_halving: the checkpoint holds no copy of the best parameters "
            "(saved with --no-restore-best?); they cannot be restored until the next "
            "improvement"
        )
        return None
    return None if best is None or best is ahead else best
