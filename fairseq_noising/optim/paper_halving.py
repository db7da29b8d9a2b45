"""``--lr-scheduler paper_halving``: the training protocol of Xie et al. (ICLR 2017), section 4.

After each epoch's validation, halve the learning rate and restore the best epoch's parameters
when validation stops improving; stop after the last of ``--halvings`` halved rates. The state is
the list of validations (:mod:`.halving_rule` decides from them); the best parameters are kept,
restored and read back on resume by :mod:`.best_params`. docs/paper_halving.md has why.
"""

import logging
from dataclasses import dataclass, field
from typing import List, Optional

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

from fairseq_noising.optim import halving_rule as rule
from fairseq_noising.optim.best_params import BestParameters

logger = logging.getLogger(__name__)

# 3: the validations; 1 and 2 (what they had decided) are converted on loading
_STATE_VERSION = 3


@dataclass
class PaperHalvingLRScheduleConfig(FairseqDataclass):
    halvings: int = field(
        default=8,
        metadata={
            "help": "train at N halved learning rates (the paper: 8, down to lr/256), then stop "
            "at the next epoch that would halve again; needs --stop-min-lr 0, a validation "
            "after every epoch (no --disable-validation) and whole checkpoints (no "
            "--use-sharded-state)"
        },
    )
    halving_threshold: Optional[float] = field(
        default=None,
        metadata={
            "help": "translation rule: halve after every epoch once the relative improvement of "
            "the validation perplexity falls below this fraction (0.01 = 1%); unset: halve after "
            "every epoch that does not improve on the best (language modelling)"
        },
    )
    halving_start_epoch: int = field(
        default=1,
        metadata={
            "help": "the rule decides from this epoch's validation on: before it, an epoch that "
            "would halve keeps the learning rate and its own parameters (the best epoch is still "
            "tracked); 1: from the first epoch, as in the paper"
        },
    )
    lr_shrink: float = field(
        default=0.5, metadata={"help": "factor applied to the learning rate at each halving"}
    )
    no_restore_best: bool = field(
        default=False,
        metadata={
            "help": "keep a non-improving epoch's parameters instead of restoring the best; "
            "without it, resuming reads the best back from checkpoint_best.pt in --save-dir"
        },
    )
    lr: List[float] = II("optimization.lr")
    stop_min_lr: float = II("optimization.stop_min_lr")
    sentence_avg: bool = II("optimization.sentence_avg")
    best_checkpoint_metric: str = II("checkpoint.best_checkpoint_metric")
    maximize_best_checkpoint_metric: bool = II("checkpoint.maximize_best_checkpoint_metric")


@register_lr_scheduler("paper_halving", dataclass=PaperHalvingLRScheduleConfig)
class PaperHalvingLRSchedule(FairseqLRScheduler):
    """Halve the learning rate and restore the best parameters when validation stops improving;
    stop after the N-th halving (docs/paper_halving.md)."""

    def __init__(self, cfg: PaperHalvingLRScheduleConfig, optimizer):
        super().__init__(cfg, optimizer)
        rule.refuse_unworkable(cfg)
        self.validations = []  # the state: every validation taken, in order
        self.best_copy = BestParameters(optimizer, enabled=not cfg.no_restore_best)
        self.num_updates = 0
        self._decided(rule.Progress())

    @property
    def best_params(self):
        """The best epoch's parameters (CPU tensors aligned with ``optimizer.params``) or None."""
        return self.best_copy.tensors

    def _decided(self, progress):
        """Sets what the validations decided (``progress``) and the learning rate it gives."""
        self.progress, best = progress, progress.best or {}
        self.halvings, self.halving_started = progress.halvings, progress.started
        self.best, self.best_epoch = best.get("loss"), best.get("epoch")
        self.best_updates = best.get("updates")
        self.finished = progress.halvings > self.cfg.halvings  # then the learning rate is 0
        self.lr = rule.rate(self.cfg, progress.halvings)
        self.optimizer.set_lr(self.lr)

    def state_dict(self):
        """Numbers, booleans, None, lists, dicts and tensors only (torch's safe loader)."""
        validations = [dict(v) for v in self.validations]
        kept = self.best_copy.to_save(self.best_updates)
        return {"version": _STATE_VERSION, "validations": validations, "best_params": kept}

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
        self.best_copy.load(state_dict.get("best_params"))  # the rest is read once fairseq loaded
        self._decided(rule.replay(self.validations, self.cfg))

    def step_begin_epoch(self, epoch):
        """Called by the trainer at the beginning of each training epoch."""
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step(self, epoch, val_loss=None):
        """Called by the trainer after each epoch's validation (and with no loss on loading)."""
        if val_loss is not None:
            self.take(dict(epoch=epoch, loss=float(val_loss), updates=self.num_updates))
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step_update(self, num_updates):
        """Called by the trainer after each update; the learning rate only changes per epoch."""
        self.num_updates = num_updates
        self.optimizer.set_lr(self.lr)
        return self.lr

    def take(self, validation):
        """Takes ``validation`` into the state, then keeps or restores the parameters and sets the
        learning rate; logs it. Also called on resume, with the one saved before its decision."""
        v = validation
        v.setdefault("inside", False)
        self.validations.append(v)
        lr_before, decision = self.lr, rule.decide(self.progress, v, self.cfg)
        if decision.kind == "ignored":
            logger.warning(
                f"paper_halving: epoch {v['epoch']} came after the last halving; ignored"
            )
        elif decision.kind != "inside":
            is_best = self.progress.best is v
            restored = self.best_copy.update(is_best) if is_best or decision.halve else False
            logger.info(rule.describe(v, decision, self.progress, self.cfg, lr_before, restored))
        self._decided(self.progress)
