"""``--lr-scheduler paper_halving``: the training protocol of Xie et al. (ICLR 2017), section 4.

After each epoch's validation: halve the learning rate and restore the best epoch's parameters
when the validation loss does not improve (or, with ``--halving-threshold``, once its relative
perplexity improvement falls below the threshold); stop after the last of ``--halvings`` halved
rates. The state is the list of validations taken; what they decided (learning rate, halvings,
best epoch) follows from them (:mod:`.halving_rule`). The protocol, the tie rule, stopping,
resuming and fp16 are in docs/paper_halving.md.
"""

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import List, Optional

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

from fairseq_noising import fairseq_compat
from fairseq_noising.errors import NoisingError
from fairseq_noising.optim import halving_rule as rule
from fairseq_noising.optim.best_params import BestParameters, read_best_checkpoint
from fairseq_noising.optim.paper_halving_checks import check_config

logger = logging.getLogger(__name__)

# 3: the validations; 1 and 2 (what they had decided) are converted on loading. The best
# parameters are in the state only where checkpoint_best.pt may not hold them.
_STATE_VERSION = 3


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
        self.validations = []  # the state: every validation taken, in order
        self.progress = rule.Progress()  # what they decided
        self.best_copy = BestParameters(optimizer, enabled=not cfg.no_restore_best)
        self.num_updates = 0
        self._pending = None  # resume: (validation, where) saved with the checkpoint, undecided
        self.optimizer.set_lr(self.lr)

    halvings = property(lambda self: self.progress.halvings)
    halving_started = property(lambda self: self.progress.started)
    # the best value (FairseqLRScheduler.__init__ sets it to None: a no-op here)
    best = property(lambda self: (self.progress.best or {}).get("loss"), lambda self, _: None)
    best_epoch = property(lambda self: (self.progress.best or {}).get("epoch"))
    best_updates = property(lambda self: (self.progress.best or {}).get("updates"))
    lr = property(lambda self: rule.rate(self.cfg, self.halvings))

    @property
    def finished(self):
        """True once the epochs at the last halved rate stopped improving (the rate is then 0)."""
        return self.halvings > self.cfg.halvings

    @property
    def best_params(self):
        """The best epoch's parameters (CPU tensors aligned with ``optimizer.params``) or None."""
        return self.best_copy.tensors

    @property
    def keeps_copy_in_checkpoint(self):
        """Whether checkpoints carry the best parameters themselves, because checkpoint_best.pt
        may not hold them: fairseq saves (and validates) inside epochs with
        ``--save-interval-updates``, skips epochs with ``--save-interval`` > 1, and a version 1
        state does not say which save holds them."""
        cfg = self.cfg
        return self.best_updates is None or cfg.save_interval_updates > 0 or cfg.save_interval > 1

    def state_dict(self):
        """Numbers, booleans, None, lists, dicts and tensors only (torch's safe loader)."""
        kept = self.best_copy.tensors if self.keeps_copy_in_checkpoint else None
        state = {"version": _STATE_VERSION, "validations": [dict(v) for v in self.validations]}
        return {**state, "best_params": None if kept is None else list(kept)}

    def load_state_dict(self, state_dict):
        if "validations" in state_dict:
            self.validations = [dict(v) for v in state_dict["validations"]]
        elif "halvings" in state_dict:
            self.validations = rule.from_version_2(state_dict)
        else:
            logger.warning(
                "paper_halving: the checkpoint's scheduler state is not paper_halving's; "
                "starting the protocol afresh"
            )
            return
        self.progress = rule.replay(self.validations, self.cfg)
        self.best_copy.load(state_dict.get("best_params"))
        self._pending = self._saved_validation()
        self._find_best_parameters()
        self.optimizer.set_lr(self.lr)

    def step_begin_epoch(self, epoch):
        """Called by the trainer at the beginning of each training epoch."""
        self._decide_pending()
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step(self, epoch, val_loss=None):
        """Called by the trainer after each epoch's validation (and with no loss on loading)."""
        if val_loss is None:
            self._decide_pending()
        else:
            self._pending = None
            self._take(dict(epoch=epoch, loss=float(val_loss), updates=self.num_updates))
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step_update(self, num_updates):
        """Called by the trainer after each update; the learning rate only changes per epoch."""
        self.num_updates = num_updates
        self.optimizer.set_lr(self.lr)
        return self.lr

    def _take(self, v, where=None):
        """Decides the validation ``v``, then keeps or restores the parameters and says so."""
        v.setdefault("inside", False)
        self.validations.append(v)
        lr_before, d = self.lr, rule.decide(self.progress, v, self.cfg)
        if d.kind in ("ignored", "inside"):
            if d.kind == "ignored":
                logger.warning(
                    f"paper_halving: epoch {v['epoch']} came after the last halving; ignored"
                )
            return
        restored = self.best_copy.update(is_best=self.progress.best is v)
        if d.kind == "inside-best":
            logger.info(
                f"paper_halving: resuming at {where}, where it validated at "
                f"{self.cfg.best_checkpoint_metric} {v['loss']:.6g} and fairseq wrote "
                f"checkpoint_best.pt (best so far {d.previous['loss']:.6g} at epoch "
                f"{d.previous['epoch']}): it becomes the best, restored after a non-improving epoch"
            )
            return
        msg = rule.describe(v, d, self.progress, self.cfg, lr_before)
        if restored:
            msg += f"; restored the parameters of epoch {self.best_epoch}"
        logger.info(msg)

    def _saved_validation(self):
        """(validation, where) saved with the checkpoint being loaded, if no decision took it:
        an epoch's (fairseq saves before it calls step), or one inside an epoch (a stop by
        --stop-time-hours or --max-update) where checkpoint_best.pt holds the best."""
        saved = fairseq_compat.checkpoint_being_loaded(self)
        pos = fairseq_compat.checkpoint_position(saved) if saved is not None else {}
        if pos.get("loss") is None or pos["epoch"] is None:
            return None
        v, seen = {k: pos[k] for k in ("epoch", "loss", "updates", "inside")}, self.validations
        if not v["inside"]:
            done = any(not u["inside"] and u["epoch"] >= v["epoch"] for u in seen)
        else:
            done = any(u["inside"] and u["updates"] == v["updates"] for u in seen)
            done |= self.best_updates is None or not self._reads_best_checkpoint()
        return None if done else (v, pos["where"])

    def _reads_best_checkpoint(self):
        return self.best_copy.enabled and self.best_copy.tensors is None

    def _decide_pending(self):
        if self._pending is None:
            return
        (v, where), self._pending = self._pending, None
        if not v["inside"]:
            logger.info(
                f"paper_halving: resuming after epoch {v['epoch']}, saved before its decision; "
                f"replaying it from the validation value saved with it, {v['loss']:.6g}"
            )
        self._take(dict(v), where)

    def _find_best_parameters(self):
        """Without a kept copy, reads the best parameters back from checkpoint_best.pt (where
        the best is not the saved validation, decided next), checking when the file was saved."""
        if not self._reads_best_checkpoint():
            return
        progress, pending = dataclasses.replace(self.progress), None  # a copy to decide on
        if self._pending is not None:
            pending = dict(self._pending[0])
            rule.decide(progress, pending, self.cfg)
        best = progress.best
        if best is None or best is pending:
            return
        if best["updates"] is None:  # version 1, written with --no-restore-best
            logger.warning(
                "paper_halving: the checkpoint holds no copy of the best parameters "
                "(saved with --no-restore-best?); they cannot be restored until the next "
                "improvement"
            )
            return
        keys = ("updates", "loss")  # the save of the best validation, and its value
        found = read_best_checkpoint(fairseq_compat.trainer_of(self), self.optimizer)
        if "error" not in found and [found[k] for k in keys] == [best[k] for k in keys]:
            self.best_copy.tensors = found["tensors"]
            logger.info(f"paper_halving: the best epoch's parameters are those of {found['path']}")
            return
        problem = found.get("error") or f"holds {found['where']} (valid {found['loss']})"
        raise NoisingError(
            f"--lr-scheduler paper_halving: {found['path']} {problem}, but resuming needs the "
            f"parameters of the best epoch {best['epoch']} (valid "
            f"{self.cfg.best_checkpoint_metric} {best['loss']:.6g}, {best['updates']} updates) "
            "that it held; put that run's checkpoint_best.pt back, or pass --reset-lr-scheduler "
            "to start the protocol afresh (or --no-restore-best to go on without restoring)"
        )
