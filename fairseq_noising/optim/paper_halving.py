"""``--lr-scheduler paper_halving``: the training protocol of Xie et al. (ICLR 2017), section 4.

After each epoch's validation: halve the learning rate and restore the best epoch's parameters
when the validation loss does not improve (or, with ``--halving-threshold``, once its relative
perplexity improvement falls below the threshold); stop after the last of ``--halvings`` halved
rates. The protocol, the tie rule, stopping, resuming and fp16 are in docs/paper_halving.md.
"""

import logging
import math
from dataclasses import dataclass, field
from typing import List, Optional

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

from fairseq_noising import fairseq_compat
from fairseq_noising.errors import NoisingError
from fairseq_noising.optim.best_params import BestParameters, read_best_checkpoint
from fairseq_noising.optim.paper_halving_checks import check_config

logger = logging.getLogger(__name__)

# 2: the best parameters are read back from checkpoint_best.pt ("best_updates" says which save
# holds them) instead of being kept in every checkpoint; version 1 states still load
_STATE_VERSION = 2


@dataclass
class PaperHalvingLRScheduleConfig(FairseqDataclass):
    halvings: int = field(
        default=8,
        metadata={
            "help": "train at N halved learning rates (the paper anneals 8 times: down to lr/256) "
            "and stop at the next epoch that would halve again, as the authors' code does; "
            "needs --stop-min-lr 0"
        },
    )
    halving_threshold: Optional[float] = field(
        default=None,
        metadata={
            "help": "translation rule: start halving once the relative improvement of the "
            "validation perplexity over the previous epoch is below this fraction (0.01 = 1%), "
            "then halve after every epoch; unset (default): halve after every epoch whose "
            "validation loss does not improve on the best (the language-modelling rule)"
        },
    )
    lr_shrink: float = field(
        default=0.5,
        metadata={"help": "factor applied to the learning rate at each halving"},
    )
    no_restore_best: bool = field(
        default=False,
        metadata={
            "help": "when an epoch does not improve the validation loss, keep its parameters "
            "instead of restoring those of the best epoch (and keep no copy of them)"
        },
    )
    lr: List[float] = II("optimization.lr")
    stop_min_lr: float = II("optimization.stop_min_lr")
    sentence_avg: bool = II("optimization.sentence_avg")
    best_checkpoint_metric: str = II("checkpoint.best_checkpoint_metric")
    maximize_best_checkpoint_metric: bool = II("checkpoint.maximize_best_checkpoint_metric")
    save_interval: int = II("checkpoint.save_interval")
    save_interval_updates: int = II("checkpoint.save_interval_updates")
    disable_validation: bool = II("dataset.disable_validation")
    validate_interval: int = II("dataset.validate_interval")
    validate_interval_updates: int = II("dataset.validate_interval_updates")
    validate_after_updates: int = II("dataset.validate_after_updates")


@register_lr_scheduler("paper_halving", dataclass=PaperHalvingLRScheduleConfig)
class PaperHalvingLRSchedule(FairseqLRScheduler):
    """Halve the learning rate and restore the best parameters when validation stops improving;
    stop after the N-th halving (docs/paper_halving.md)."""

    def __init__(self, cfg: PaperHalvingLRScheduleConfig, optimizer):
        super().__init__(cfg, optimizer)
        check_config(cfg)
        self.threshold = cfg.halving_threshold
        self.lr = float(cfg.lr[0])
        self.best = None  # best validation value so far (lower is better)
        self.best_epoch = None
        self.best_updates = None  # number of updates when the best was validated (and saved)
        self.best_copy = BestParameters(optimizer, enabled=not cfg.no_restore_best)
        self.halvings = 0
        self.halving_started = False  # threshold rule: halve after every epoch from now on
        self.last_loss = None  # previous epoch's validation value (threshold rule)
        self.epoch = 0  # last epoch begun
        self.last_step_epoch = None  # last epoch whose validation value was processed
        self.num_updates = 0
        self.fairseq_best = None  # fairseq's running best as seen after the last decision
        self._pending_epoch = None  # resume: the epoch whose decision the checkpoint lacks
        self._fairseq_best_at_load = None
        self._best_checkpoint = None  # resume: what checkpoint_best.pt holds (read_best_checkpoint)
        self.optimizer.set_lr(self.lr)

    @property
    def best_params(self):
        """The best epoch's parameters (CPU tensors aligned with ``optimizer.params``) or None."""
        return self.best_copy.tensors

    @property
    def finished(self):
        """True once the epochs at the last halved rate stopped improving (the rate is then 0)."""
        return self.halvings > self.cfg.halvings

    @property
    def keeps_copy_in_checkpoint(self):
        """Whether checkpoints carry the best parameters themselves, because checkpoint_best.pt
        may not hold them: fairseq saves (and validates) inside epochs with
        ``--save-interval-updates``, skips epochs with ``--save-interval`` > 1, and a version 1
        state does not say which save holds them."""
        cfg = self.cfg
        return self.best_updates is None or cfg.save_interval_updates > 0 or cfg.save_interval > 1

    def state_dict(self):
        """Tensors, numbers, booleans, None, lists and dicts only (torch's safe loader)."""
        best_params = self.best_copy.tensors if self.keeps_copy_in_checkpoint else None
        return {
            "version": _STATE_VERSION,
            "lr": self.lr,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "best_updates": self.best_updates,
            "halvings": self.halvings,
            "halving_started": self.halving_started,
            "last_loss": self.last_loss,
            "epoch": self.epoch,
            "last_step_epoch": self.last_step_epoch,
            "num_updates": self.num_updates,
            "fairseq_best": self.fairseq_best,
            "best_params": list(best_params) if best_params is not None else None,
        }

    def load_state_dict(self, state_dict):
        if "halvings" not in state_dict:
            # another scheduler's state (e.g. switching schedulers): keep only its best loss
            logger.warning(
                "paper_halving: the checkpoint's scheduler state is not paper_halving's; "
                "starting the protocol afresh"
            )
            self.best = state_dict.get("best")
            return
        self.lr = float(state_dict["lr"])
        self.best = state_dict["best"]
        self.best_epoch = state_dict["best_epoch"]
        self.best_updates = state_dict.get("best_updates")  # version 1: unknown
        self.halvings = int(state_dict["halvings"])
        self.halving_started = bool(state_dict["halving_started"])
        self.last_loss = state_dict["last_loss"]
        self.epoch = int(state_dict["epoch"])
        self.last_step_epoch = state_dict["last_step_epoch"]
        self.num_updates = int(state_dict["num_updates"])
        self.fairseq_best = state_dict["fairseq_best"]
        kept = state_dict.get("best_params")
        self.best_copy.load(kept)
        self._best_checkpoint = None
        if self.best is not None and self.best_copy.enabled and kept is None:
            if self.best_updates is None:
                logger.warning(
                    "paper_halving: the checkpoint holds no copy of the best parameters "
                    "(saved with --no-restore-best?); they cannot be restored until the next "
                    "improvement"
                )
            else:  # checked once the replay below has settled what the best is
                found = read_best_checkpoint(fairseq_compat.trainer_of(self), self.optimizer)
                # written by the save resumed from: same updates, and the model loaded from it
                found["saved_here"] = (
                    found.get("updates") == self.num_updates
                    and found.get("value") is not None
                    and self.best_copy.are_current(found["tensors"])
                )
                self._best_checkpoint = found
        if self.finished:
            self.lr = 0.0  # the run had ended, or --halvings was lowered on resume
        # fairseq saves the end-of-epoch checkpoint before it calls step(): replay that decision
        last = self.last_step_epoch if self.last_step_epoch is not None else 0
        self._pending_epoch = self.epoch if self.epoch > last else None
        self._fairseq_best_at_load = fairseq_compat.best_validation_value(None)
        self.optimizer.set_lr(self.lr)

    def step_begin_epoch(self, epoch):
        """Called by the trainer at the beginning of each training epoch."""
        if self._pending_epoch is not None:
            logger.warning(
                "paper_halving: could not replay the decision for epoch %d, which the resumed "
                "checkpoint was saved before (fairseq did not restore its best validation value, "
                "e.g. --reset-meters); continuing without it",
                self._pending_epoch,
            )
            self._pending_epoch = None
        self._settle_best_checkpoint()
        self.epoch = epoch
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step(self, epoch, val_loss=None):
        """Called by the trainer after each epoch's validation (and with no loss on loading)."""
        if val_loss is None:
            if not self._maybe_replay(epoch):
                self._settle_best_checkpoint()
        else:
            self._pending_epoch = None
            self.epoch = max(self.epoch, epoch)
            self._decide(epoch, float(val_loss))
            fairseq_best = fairseq_compat.best_validation_value(None)
            self.fairseq_best = None if fairseq_best is None else float(fairseq_best)
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step_update(self, num_updates):
        """Called by the trainer after each update; the learning rate only changes per epoch."""
        self.num_updates = num_updates
        self.optimizer.set_lr(self.lr)
        return self.lr

    def _decide(self, epoch, val, known=True):
        """The end-of-epoch decision. ``known=False``: ``val`` is only known not to improve."""
        self.last_step_epoch = epoch
        if self.finished:
            logger.warning(
                "paper_halving: epoch %d validated after the last halving; ignored", epoch
            )
            return
        prev_best, prev_best_epoch = self.best, self.best_epoch
        improved = not math.isnan(val) and (self.best is None or val < self.best)
        # a tie does not improve (the rate halves), but fairseq's checkpoint_best.pt takes it (its
        # test is <=): the tie becomes the best epoch, so the parameters stay those of that file
        tie = known and not improved and self.best is not None and val == self.best
        if improved:
            self.best = val
        if improved or tie:
            self.best_epoch, self.best_updates = epoch, self.num_updates
        else:
            self._take_best_checkpoint()
        restored = self.best_copy.update(is_best=improved or tie)

        rel = None
        if self.threshold is not None:
            rel = self._relative_ppl_improvement(self.last_loss, val)
            if not improved or (rel is not None and rel < self.threshold):
                self.halving_started = True
        halve = self.halving_started if self.threshold is not None else not improved
        self.last_loss = val if known else None

        shown = f"{val:.6g}" if known else "(not lower than fairseq's best)"
        if improved:
            what = f"improves on {prev_best:.6g}" if prev_best is not None else "is the first"
        elif tie:
            what = (
                f"equals the best (epoch {prev_best_epoch}) and replaces it in "
                "checkpoint_best.pt, as fairseq does"
            )
        elif prev_best is not None:
            what = f"does not improve on {prev_best:.6g} (epoch {prev_best_epoch})"
        else:
            what = "is not a number"
        if rel is not None:
            what += f", relative perplexity improvement {rel:.4%}"
        msg = (
            f"paper_halving: epoch {epoch}: valid {self.cfg.best_checkpoint_metric} {shown} {what}"
        )
        msg += self._halve() if halve else f"; lr stays {self.lr:g}"
        if restored:
            msg += f"; restored the parameters of epoch {self.best_epoch}"
        logger.info(msg)

    def _halve(self):
        """Halves the learning rate, or sets it to 0 after the last halving; says what it did."""
        old_lr = self.lr
        self.halvings += 1
        if self.finished:
            self.lr = 0.0
            return (
                f"; stop: all {self.cfg.halvings} halvings done: lr {old_lr:g} -> 0"
                ", training stops (--stop-min-lr)"
            )
        self.lr = old_lr * self.cfg.lr_shrink
        return f"; halving {self.halvings}/{self.cfg.halvings}: lr {old_lr:g} -> {self.lr:g}"

    def _relative_ppl_improvement(self, prev, cur):
        """(ppl_prev - ppl_cur) / ppl_prev, with ppl = 2 ** loss unless the metric is ppl."""
        if prev is None or not math.isfinite(prev):
            return None
        if self.cfg.best_checkpoint_metric == "ppl":
            return (prev - cur) / prev
        # 1 - 2 ** (cur - prev); the clamp keeps expm1 finite, the result is -huge anyway
        return -math.expm1(min(cur - prev, 1000.0) * math.log(2.0))

    def _maybe_replay(self, epoch):
        """On resume, applies the decision for the epoch at whose end the checkpoint was saved,
        reading its loss from checkpoint_best.pt if that save wrote it, else from fairseq's
        restored best (docs/paper_halving.md, "Resuming"). True while waiting for the latter."""
        pending = self._pending_epoch
        if pending is None:
            return False
        validated = (
            pending % self.cfg.validate_interval == 0
            and self.num_updates >= self.cfg.validate_after_updates
        )
        if epoch != pending + 1 or not validated:
            # a mid-epoch checkpoint (fairseq resumes inside epoch `pending`), or no validation
            self._pending_epoch = None
            return False
        fairseq_best = fairseq_compat.best_validation_value(None)
        if fairseq_best is None or fairseq_best is self._fairseq_best_at_load:
            return True  # fairseq has not restored its best from this checkpoint yet; next call
        self._pending_epoch = None
        if self.cfg.validate_interval_updates > 0 or self.cfg.save_interval_updates > 0:
            logger.warning(
                "paper_halving: resuming after epoch %d, whose decision the checkpoint was saved "
                "before; with mid-epoch validations fairseq's best validation value does not give "
                "that epoch's loss, so the decision is not replayed",
                pending,
            )
            return False
        fairseq_best = float(fairseq_best)
        found = self._best_checkpoint or {}
        # if this save wrote checkpoint_best.pt, the epoch's value is there (a tie included)
        here = found.get("saved_here", False)
        value = float(found["value"]) if here else fairseq_best
        logger.info(
            "paper_halving: resuming after epoch %d, saved before its decision; replaying it "
            "from %s %.6g",
            pending,
            f"the validation value saved with it in {found['path']}:"
            if here
            else "fairseq's best validation value",
            value,
        )
        if here or self.fairseq_best is None or fairseq_best < self.fairseq_best:
            self._decide(pending, value)
        else:
            self._decide(pending, math.inf, known=False)
        self.fairseq_best = fairseq_best
        return False

    def _settle_best_checkpoint(self):
        """At the end of a resume: the best parameters are kept, replayed or in checkpoint_best.pt.

        A save inside an epoch (``--stop-time-hours``, ``--max-update``) validates, and fairseq
        writes checkpoint_best.pt there if the value is not above its best: that point then
        becomes the best, so that the parameters stay those of checkpoint_best.pt."""
        found = self._best_checkpoint
        if found is None or self.best_copy.tensors is not None:
            self._best_checkpoint = None
            return
        value = float(found["value"]) if found.get("saved_here") else math.inf
        if value <= self.best and self.num_updates != self.best_updates:
            logger.info(
                "paper_halving: resuming at %s, where %s was saved (valid %s %.6g, best so far "
                "%.6g at epoch %d): it becomes the best, restored after a non-improving epoch",
                found["where"],
                found["path"],
                self.cfg.best_checkpoint_metric,
                value,
                self.best,
                self.best_epoch,
            )
            self.best, self.best_epoch, self.best_updates = value, self.epoch, self.num_updates
            if self.fairseq_best is None or self.best < self.fairseq_best:
                self.fairseq_best = self.best
        self._take_best_checkpoint()

    def _take_best_checkpoint(self):
        """After a resume, takes the best parameters from checkpoint_best.pt if it holds them."""
        found, self._best_checkpoint = self._best_checkpoint, None
        if found is None or self.best_copy.tensors is not None:
            return
        if "error" not in found and found["updates"] == self.best_updates:
            if found["value"] is not None and float(found["value"]) == self.best:
                self.best_copy.tensors = found["tensors"]
                logger.info(
                    "paper_halving: the parameters of the best epoch %d are those of %s",
                    self.best_epoch,
                    found["path"],
                )
                return
        problem = found.get("error") or f"holds {found['where']} (valid {found['value']})"
        raise NoisingError(
            f"--lr-scheduler paper_halving: {found['path']} {problem}, but resuming needs the "
            f"parameters of the best epoch {self.best_epoch} (valid "
            f"{self.cfg.best_checkpoint_metric} {self.best:.6g}, {self.best_updates} updates) "
            "that it held; put that run's checkpoint_best.pt back, or pass --reset-lr-scheduler "
            "to start the protocol afresh (or --no-restore-best to go on without restoring)"
        )
