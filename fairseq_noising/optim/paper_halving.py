"""``--lr-scheduler paper_halving``: the training protocol of Xie et al. (ICLR 2017), section 4.

After each epoch's validation, halve the learning rate and restore the best epoch's parameters
when validation stops improving; stop after the last of ``--halvings`` halved rates. The state is
the list of validations (:mod:`.halving_rule` decides from them); docs/paper_halving.md has why.
"""

import logging
from dataclasses import dataclass, field
from typing import Any, List, Optional

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

from fairseq_noising import fairseq_compat
from fairseq_noising.errors import NoisingError
from fairseq_noising.optim import halving_rule as rule
from fairseq_noising.optim.best_params import BestParameters
from fairseq_noising.optim.halving_resume import read_checkpoints

logger = logging.getLogger(__name__)

# 3: the validations; 1 and 2 (what they had decided) are converted on loading. The best
# parameters are in the state only where checkpoint_best.pt may not hold them.
_STATE_VERSION = 3
_PPL_METRICS = ("loss", "nll_loss", "ppl")


@dataclass
class PaperHalvingLRScheduleConfig(FairseqDataclass):
    halvings: int = field(
        default=8,
        metadata={
            "help": "train at N halved learning rates (the paper: 8, down to lr/256), then stop "
            "at the next epoch that would halve again; needs --stop-min-lr 0"
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
    lr_shrink: float = field(
        default=0.5, metadata={"help": "factor applied to the learning rate at each halving"}
    )
    no_restore_best: bool = field(
        default=False,
        metadata={"help": "keep a non-improving epoch's parameters instead of restoring the best"},
    )
    lr: List[float] = II("optimization.lr")
    stop_min_lr: float = II("optimization.stop_min_lr")
    sentence_avg: bool = II("optimization.sentence_avg")
    best_checkpoint_metric: str = II("checkpoint.best_checkpoint_metric")
    maximize_best_checkpoint_metric: bool = II("checkpoint.maximize_best_checkpoint_metric")
    save_interval: int = II("checkpoint.save_interval")
    save_interval_updates: int = II("checkpoint.save_interval_updates")
    disable_validation: bool = II("dataset.disable_validation")
    # for fairseq_compat: the checkpoint that fairseq-train resumes from, and on how many ranks
    checkpoint: Any = II("checkpoint")
    distributed_training: Any = II("distributed_training")


def _refuse_unworkable(cfg):
    """One line naming the flag, for a command line on which the protocol cannot work."""

    def fail(message):
        raise NoisingError(f"--lr-scheduler paper_halving: {message}")

    if len(cfg.lr) != 1:
        fail(f"give a single --lr (got {list(cfg.lr)}); the schedule is made by halving it")
    if cfg.halvings < 1:
        fail(f"--halvings must be >= 1 (got {cfg.halvings})")
    if not 0.0 < cfg.lr_shrink < 1.0:
        fail(f"--lr-shrink must be in (0, 1) (got {cfg.lr_shrink})")
    if cfg.stop_min_lr < 0:
        fail(
            "pass --stop-min-lr 0: after the last halving the scheduler sets the learning rate "
            "to 0 and fairseq-train stops only when it is <= --stop-min-lr "
            f"(got --stop-min-lr {cfg.stop_min_lr})"
        )
    last_lr = cfg.lr[0] * cfg.lr_shrink**cfg.halvings
    if cfg.stop_min_lr >= last_lr:
        fail(
            f"--stop-min-lr {cfg.stop_min_lr} would stop training before the last halved rate "
            f"(learning rate {last_lr:g} after {cfg.halvings}) is trained; pass --stop-min-lr 0"
        )
    if cfg.disable_validation:
        fail("needs the validation loss after every epoch; drop --disable-validation")
    metric = cfg.best_checkpoint_metric
    if cfg.maximize_best_checkpoint_metric:
        fail(
            "halves when a loss stops decreasing; drop --maximize-best-checkpoint-metric "
            f"(--best-checkpoint-metric {metric})"
        )
    if cfg.halving_threshold is not None and not 0.0 < cfg.halving_threshold < 1.0:
        fail(f"--halving-threshold must be in (0, 1) (got {cfg.halving_threshold})")
    if cfg.halving_threshold is not None and metric not in _PPL_METRICS:
        fail(
            "--halving-threshold compares validation perplexities, which needs "
            f"--best-checkpoint-metric nll_loss, loss or ppl (got {metric})"
        )
    if cfg.halving_threshold is not None and metric == "loss" and cfg.sentence_avg:
        fail(
            "with --sentence-avg the validation 'loss' is per sentence, not the per-token "
            "log2 perplexity that --halving-threshold needs; add --best-checkpoint-metric nll_loss"
        )
    try:
        fairseq_compat.checkpoint_files(cfg.checkpoint, cfg.distributed_training)
    except ValueError as e:
        fail(str(e))


@register_lr_scheduler("paper_halving", dataclass=PaperHalvingLRScheduleConfig)
class PaperHalvingLRSchedule(FairseqLRScheduler):
    """Halve the learning rate and restore the best parameters when validation stops improving;
    stop after the N-th halving (docs/paper_halving.md)."""

    def __init__(self, cfg: PaperHalvingLRScheduleConfig, optimizer):
        super().__init__(cfg, optimizer)
        _refuse_unworkable(cfg)
        self.validations = []  # the state: every validation taken, in order
        self.progress = rule.Progress()  # what they decided
        self.best_copy = BestParameters(optimizer, enabled=not cfg.no_restore_best)
        self.num_updates = 0
        self._resuming = False  # loaded a state: the checkpoint file is read at the next step
        self.optimizer.set_lr(self.lr)

    halvings = property(lambda self: self.progress.halvings)
    halving_started = property(lambda self: self.progress.started)
    # the best value (FairseqLRScheduler.__init__ sets it to None: a no-op here)
    best = property(lambda self: (self.progress.best or {}).get("loss"), lambda self, _: None)
    best_epoch = property(lambda self: (self.progress.best or {}).get("epoch"))
    best_updates = property(lambda self: (self.progress.best or {}).get("updates"))
    lr = property(lambda self: rule.rate(self.cfg, self.halvings))
    # True once the epochs at the last halved rate stopped improving (the rate is then 0)
    finished = property(lambda self: self.halvings > self.cfg.halvings)
    # the best epoch's parameters (CPU tensors aligned with optimizer.params) or None
    best_params = property(lambda self: self.best_copy.tensors)

    @property
    def keeps_copy_in_checkpoint(self):
        """Whether checkpoints carry the best parameters, because checkpoint_best.pt may not hold
        them: saves inside epochs, skipped epochs, or a version 1 state (docs/paper_halving.md)."""
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
        self._resuming = True
        self.optimizer.set_lr(self.lr)

    def step_begin_epoch(self, epoch):
        """Called by the trainer at the beginning of each training epoch."""
        self._resume(epoch)
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step(self, epoch, val_loss=None):
        """Called by the trainer after each epoch's validation (and with no loss on loading)."""
        if val_loss is None:
            self._resume(epoch)
        else:
            self._resuming = False
            self._decide(dict(epoch=epoch, loss=float(val_loss), updates=self.num_updates))
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step_update(self, num_updates):
        """Called by the trainer after each update; the learning rate only changes per epoch."""
        self.num_updates = num_updates
        self.optimizer.set_lr(self.lr)
        return self.lr

    def _decide(self, validation):
        """Takes ``validation`` into the state, then keeps or restores the parameters; logs it."""
        v = validation
        v.setdefault("inside", False)
        self.validations.append(v)
        lr_before, decision = self.lr, rule.decide(self.progress, v, self.cfg)
        if decision.kind == "ignored":
            logger.warning(
                f"paper_halving: epoch {v['epoch']} came after the last halving; ignored"
            )
        if decision.kind in ("ignored", "inside"):
            return
        restored = self.best_copy.update(is_best=self.progress.best is v)
        previous, metric = decision.previous, self.cfg.best_checkpoint_metric
        if decision.kind == "inside-best":
            line = (
                f"paper_halving: resuming at update {v['updates']} inside epoch {v['epoch']}, "
                f"where it validated at {metric} {v['loss']:.6g} and fairseq wrote "
                f"checkpoint_best.pt (best so far {previous['loss']:.6g} at epoch "
                f"{previous['epoch']}): it becomes the best, restored after a non-improving epoch"
            )
        else:
            line = rule.describe(v, decision, self.progress, self.cfg, lr_before)
            line += f"; restored the parameters of epoch {self.best_epoch}" if restored else ""
        logger.info(line)

    def _resume(self, epoch):
        """At fairseq's first step after ``load_state_dict`` (the model, updates and epoch loaded,
        nothing trained): reads the best parameters back from checkpoint_best.pt unless a copy was
        kept, then decides the validation saved with the checkpoint if none did. Rank 0 reads."""
        if not self._resuming:
            return
        self._resuming = False
        world = self.cfg.distributed_training.distributed_world_size
        found = fairseq_compat.from_first_rank(lambda: read_checkpoints(self, epoch), world)
        best, pending = found["best"], found["pending"]
        if "error" in found:
            raise NoisingError(
                f"--lr-scheduler paper_halving: {found['path']} {found['error']}, but resuming "
                f"needs the parameters of the best epoch {best['epoch']} (valid "
                f"{self.cfg.best_checkpoint_metric} {best['loss']:.6g}, {best['updates']} "
                "updates) that it held; put that run's checkpoint_best.pt back, or pass "
                "--reset-lr-scheduler to start the protocol afresh (or --no-restore-best to go "
                "on without restoring)"
            )
        if best is not None:
            self.best_copy.tensors = found["tensors"]
            logger.info(f"paper_halving: the best epoch's parameters are those of {found['path']}")
        if pending is not None and not pending["inside"]:
            logger.info(
                f"paper_halving: resuming after epoch {pending['epoch']}, saved before its "
                "decision; replaying it from the validation value saved with it, "
                f"{pending['loss']:.6g}"
            )
        if pending is not None:
            self._decide(pending)
