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
from fairseq_noising.optim.best_params import BestParameters, read_best_checkpoint, read_checkpoint
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
    # where fairseq-train resumes from (fairseq_compat.checkpoint_files), and on how many ranks
    save_dir: str = II("checkpoint.save_dir")
    restore_file: str = II("checkpoint.restore_file")
    continue_once: Optional[str] = II("checkpoint.continue_once")
    checkpoint_suffix: str = II("checkpoint.checkpoint_suffix")
    distributed_world_size: int = II("distributed_training.distributed_world_size")


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
        self._resuming = False  # loaded a state: the checkpoint file is read at the next step
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
            self._take(dict(epoch=epoch, loss=float(val_loss), updates=self.num_updates))
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step_update(self, num_updates):
        """Called by the trainer after each update; the learning rate only changes per epoch."""
        self.num_updates = num_updates
        self.optimizer.set_lr(self.lr)
        return self.lr

    def _take(self, v):
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
                f"paper_halving: resuming at update {v['updates']} inside epoch {v['epoch']}, "
                f"where it validated at "
                f"{self.cfg.best_checkpoint_metric} {v['loss']:.6g} and fairseq wrote "
                f"checkpoint_best.pt (best so far {d.previous['loss']:.6g} at epoch "
                f"{d.previous['epoch']}): it becomes the best, restored after a non-improving epoch"
            )
            return
        msg = rule.describe(v, d, self.progress, self.cfg, lr_before)
        if restored:
            msg += f"; restored the parameters of epoch {self.best_epoch}"
        logger.info(msg)

    def _resume(self, epoch):
        """At fairseq's first step after ``load_state_dict``: ``Trainer.load_checkpoint`` has
        loaded the model and handed over the updates (``step_update``) and the epoch, and nothing
        is trained yet. Without a kept copy, reads the best parameters back from
        checkpoint_best.pt; then takes the validation saved with the checkpoint if no decision
        took it. Rank 0 reads the files; every rank gets what it found."""
        if not self._resuming:
            return
        self._resuming = False
        world = self.cfg.distributed_world_size
        found = fairseq_compat.from_first_rank(lambda: self._look_back(epoch), world)
        best, v = found["best"], found["pending"]
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
        if v is None:
            return
        if not v["inside"]:
            logger.info(
                f"paper_halving: resuming after epoch {v['epoch']}, saved before its decision; "
                f"replaying it from the validation value saved with it, {v['loss']:.6g}"
            )
        self._take(v)

    def _look_back(self, epoch):
        """(On rank 0.) ``{"pending"}``: the validation saved with the checkpoint being loaded (the
        file that fairseq's rule names, if it holds the updates handed over), if undecided;
        ``{"best", "path"}``: the best validation whose parameters are to be read back from
        checkpoint_best.pt at ``path`` (None: none), with ``{"tensors"}`` or ``{"error"}``."""
        path, best_path = fairseq_compat.checkpoint_files(self.cfg)
        loaded, problem = read_checkpoint(path)
        pos = fairseq_compat.checkpoint_position(loaded or {})
        if loaded is not None and pos["updates"] != self.num_updates:
            problem = f"holds {pos['where']}, not epoch {epoch} at {self.num_updates} updates"
            loaded = None
        if loaded is None:
            logger.warning(
                f"paper_halving: {path} {problem}: it is not the checkpoint being loaded; a "
                "validation saved with that one before its decision is not replayed"
            )
        pending = self._undecided(pos) if loaded is not None else None
        found = dict(pending=pending, best=self._best_to_read(pending), path=best_path)
        if found["best"] is not None and loaded is None:
            found["error"] = f"cannot be mapped onto the model without it ({path} {problem})"
        elif found["best"] is not None:
            found.update(read_best_checkpoint(best_path, self.optimizer, loaded, found["best"]))
        return found

    def _undecided(self, pos):
        """The validation saved with the checkpoint (at ``pos``) if no decision took it: an
        epoch's (fairseq saves before it calls step), or one inside an epoch (a stop by
        --stop-time-hours or --max-update) where checkpoint_best.pt holds the best."""
        if pos["loss"] is None or pos["epoch"] is None:
            return None
        v, seen = {k: pos[k] for k in ("epoch", "loss", "updates", "inside")}, self.validations
        if not v["inside"]:
            done = any(not u["inside"] and u["epoch"] >= v["epoch"] for u in seen)
        else:
            done = any(u["inside"] and u["updates"] == v["updates"] for u in seen)
            done |= self.best_updates is None or not self._reads_best_checkpoint()
        return None if done else v

    def _reads_best_checkpoint(self):
        return self.best_copy.enabled and self.best_copy.tensors is None

    def _best_to_read(self, pending):
        """The best validation whose parameters are to be read from checkpoint_best.pt: without
        a kept copy, unless the best is the pending validation, decided on a copy of the
        progress, or there is none."""
        if not self._reads_best_checkpoint():
            return None
        progress, ahead = dataclasses.replace(self.progress), None
        if pending is not None:
            ahead = dict(pending)
            rule.decide(progress, ahead, self.cfg)
        best = progress.best
        if best is not None and best is not ahead and best["updates"] is None:
            logger.warning(  # version 1, written with --no-restore-best
                "paper_halving: the checkpoint holds no copy of the best parameters "
                "(saved with --no-restore-best?); they cannot be restored until the next "
                "improvement"
            )
            return None
        return None if best is None or best is ahead else best
