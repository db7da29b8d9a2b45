"""The best epoch's parameters for ``--lr-scheduler paper_halving``: kept on the CPU, copied back
after a non-improving epoch, and read back from ``checkpoint_best.pt`` when fairseq-train resumes.

The scheduler (:mod:`.paper_halving`) decides, and keeps and restores through
:class:`BestParameters`. The checkpoint files are read by :func:`on_load_checkpoint`, with which
the plugin ends fairseq's ``Trainer.load_checkpoint`` (:mod:`.fairseq_compat`): it sees the
trainer's whole config, so the scheduler knows no checkpoint file. See docs/paper_halving.md
("Restoring the best parameters", "Resuming").
"""

import dataclasses
import logging
import os

import torch

from fairseq_noising import checkpoint_safety, fairseq_compat
from fairseq_noising.optim import halving_rule as rule

logger = logging.getLogger(__name__)


class BestParameters:
    """A CPU copy of the parameters that a fairseq optimizer updates, taken at the best epoch
    (``tensors``, aligned with ``optimizer.params``, or None); ``enabled=False`` keeps nothing."""

    def __init__(self, optimizer, enabled=True):
        self.optimizer, self.enabled, self.tensors = optimizer, enabled, None
        self.in_checkpoints = False  # checkpoint_best.pt may miss the best: set on loading
        self.loaded = False  # loaded from a checkpoint's scheduler state: the files are read

    @property
    def to_read_back(self) -> bool:
        """Wanted but not held: after a resume, read back from checkpoint_best.pt."""
        return self.enabled and self.tensors is None

    def update(self, is_best: bool) -> bool:
        """Keep the parameters if ``is_best``, else restore the kept ones; True if it restored."""
        if not self.enabled:
            return False
        if is_best:
            self._snapshot()
            return False
        if self.tensors is None:
            return False
        self._restore()
        return True

    def _snapshot(self):
        # new tensors each time: a checkpoint still being written may hold the previous ones
        with torch.no_grad():
            self.tensors = [p.detach().to("cpu", copy=True) for p in self.optimizer.params]

    def _restore(self):
        # in place, so that the optimizer, DDP and the model keep referring to the same tensors
        with torch.no_grad():
            for p, saved in zip(self.optimizer.params, self.tensors):
                p.copy_(saved)
        fairseq_compat.sync_fp16_model(self.optimizer)  # --fp16: params are the fp32 master copy
        # momentum buffers and Adam moments belong to the abandoned trajectory
        state = getattr(getattr(self.optimizer, "optimizer", None), "state", None)
        if state is not None:
            state.clear()

    def load(self, saved):
        """Takes the tensors kept in a checkpoint's scheduler state (None: none, the best is read
        back from checkpoint_best.pt), checked against the model."""
        self.loaded = True
        if saved is None or not self.enabled:
            self.tensors = None
            return
        params = list(self.optimizer.params)
        if len(saved) != len(params) or any(s.shape != p.shape for s, p in zip(saved, params)):
            raise rule.refusal(
                "the best parameters in the checkpoint do not match the model "
                f"({len(saved)} tensors for {len(params)} parameters); pass "
                "--reset-lr-scheduler to start the protocol afresh"
            )
        self.tensors = [
            s.detach().to(device="cpu", dtype=p.dtype, copy=True) for s, p in zip(saved, params)
        ]

    def to_save(self, best_updates):
        """The copy, for the scheduler's state, where checkpoint_best.pt may not hold the best:
        saves inside epochs or skipped epochs (``in_checkpoints``), or a best of unknown updates
        (a version 1 state); else None."""
        kept = self.tensors if self.in_checkpoints or best_updates is None else None
        return None if kept is None else list(kept)


def on_load_checkpoint(trainer, extra_state):
    """The end of fairseq's ``Trainer.load_checkpoint`` (``extra_state``: what it returns, None
    where it loaded nothing) under ``--lr-scheduler paper_halving``: refuses the trainer's
    settings that the protocol cannot work with; after a resume, reads the best parameters back
    from checkpoint_best.pt unless a copy was kept, then decides the validation saved with the
    checkpoint if none did. Rank 0 reads the files."""
    cfg = trainer.cfg
    if getattr(cfg.lr_scheduler, "_name", None) != "paper_halving":
        return
    if cfg.dataset.disable_validation:
        raise rule.refusal("needs the validation loss after every epoch; drop --disable-validation")
    start, last = getattr(cfg.lr_scheduler, "halving_start_epoch", 1), cfg.optimization.max_epoch
    if 0 < last < start:
        raise rule.refusal(
            f"--halving-start-epoch {start} comes after --max-epoch {last}: the rule would never "
            "decide; lower it or raise --max-epoch"
        )
    try:
        files = fairseq_compat.checkpoint_files(cfg.checkpoint, cfg.distributed_training)
    except ValueError as e:
        raise rule.refusal(str(e)) from None
    scheduler, saves = trainer.lr_scheduler, cfg.checkpoint
    copy = scheduler.best_copy
    copy.in_checkpoints = saves.save_interval_updates > 0 or saves.save_interval > 1
    if not copy.loaded:
        return
    copy.loaded, epoch = False, extra_state["train_iterator"]["epoch"]
    world = cfg.distributed_training.distributed_world_size
    found = fairseq_compat.from_first_rank(lambda: _read(scheduler, files, epoch), world)
    best, pending = found["best"], found["pending"]
    if "error" in found:
        raise rule.refusal(
            f"{found['path']} {found['error']}, but resuming needs the parameters of the best "
            f"epoch {best['epoch']} (valid {scheduler.cfg.best_checkpoint_metric} "
            f"{best['loss']:.6g}, {best['updates']} updates) that it held; put that run's "
            "checkpoint_best.pt back, or pass --reset-lr-scheduler to start the protocol afresh "
            "(or --no-restore-best to go on without restoring)"
        )
    if best is not None:
        copy.tensors = found["tensors"]
        logger.info(f"paper_halving: the best epoch's parameters are those of {found['path']}")
    if pending is not None and not pending["inside"]:
        logger.info(
            f"paper_halving: resuming after epoch {pending['epoch']}, saved before its decision; "
            f"replaying it from the validation value saved with it, {pending['loss']:.6g}"
        )
    if pending is not None:
        scheduler.take(pending)


def _read(scheduler, files, epoch) -> dict:
    """``pending``: the validation saved with the checkpoint being loaded (``files[0]``), if
    undecided; ``best``: the best validation whose parameters are read from checkpoint_best.pt
    (``files[1]``, ``path``; None: none), with ``tensors`` or ``error``."""
    (path, best_path), updates = files, scheduler.num_updates
    loaded, problem = _load(path)
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


def _load(path):
    """(the fairseq checkpoint at ``path``, None), or (None, why it cannot be read)."""
    if not os.path.isfile(path):
        return None, "is missing"
    try:
        return checkpoint_safety.read_checkpoint(path), None
    except Exception as e:  # a truncated or foreign file: zip, pickle or torch errors
        return None, f"cannot be read ({(str(e).strip().splitlines() or [type(e).__name__])[0]})"


def read_best_checkpoint(path, optimizer, loaded, best) -> dict:
    """``{"tensors"}``: the values of ``optimizer.params`` in ``checkpoint_best.pt`` at ``path``
    (new CPU tensors), if it was saved at the validation ``best`` (its updates and value); or
    ``{"error"}`` saying why not. ``loaded`` is the checkpoint being loaded: a parameter's value
    there says which of the file's tensors is its (:func:`.fairseq_compat.optimizer_values`)."""
    state, problem = _load(path)
    if state is not None:
        saved = fairseq_compat.checkpoint_position(state)
        if (saved["updates"], saved["loss"]) != (best["updates"], best["loss"]):
            problem = f"holds {saved['where']} (valid {saved['loss']})"
        else:
            try:
                return {"tensors": fairseq_compat.optimizer_values(optimizer, loaded, state)}
            except ValueError as e:
                problem = f"does not match the model ({e})"
    return {"error": problem}
