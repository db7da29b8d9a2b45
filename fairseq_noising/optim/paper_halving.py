"""The paper's optimisation protocol as a fairseq learning-rate scheduler: ``--lr-scheduler paper_halving``.

Section 4 of the paper (following Zaremba et al., 2014 for Penn Treebank) trains with plain SGD at
learning rate 1.0, clips gradients at norm 5, halves the learning rate whenever the validation
cross entropy does not decrease after an epoch, "anneals the learning rate 8 times before stopping
training" and keeps the model with the lowest validation perplexity. The authors' code
(``lm.py``: ``if decay_count > max_decays: break``) trains at each of the 8 halved rates, down to
1/256, and stops at the next (9th) non-improvement; ``--halvings 8`` does the same. This scheduler implements the
part of that protocol that lives between epochs; the rest is ordinary fairseq flags
(``--optimizer sgd --lr 1.0 --clip-norm 5``), and fairseq writes ``checkpoint_best.pt`` by itself.

Modes
-----
*Plateau (default, the language-modelling rule).* After every epoch's validation:

- the validation loss is lower than the best so far: it becomes the best, and a copy of the
  parameters is kept (on the CPU);
- otherwise: the learning rate is multiplied by ``--lr-shrink`` (0.5) **and** the parameters of the
  best epoch so far are copied back into the model, so that the next epoch restarts from the best
  point with the smaller step (``--no-restore-best`` keeps the current parameters instead).
  A tie with the best (fairseq rounds the loss to 3 decimals) halves too, but keeps the tied
  epoch's parameters as the new best, because fairseq's ``checkpoint_best.pt`` takes a tie.

*Threshold (``--halving-threshold 0.01``, the translation rule).* The paper's IWSLT set-up "starts
halving the learning rate when the relative difference in validation perplexity between two
consecutive epochs is less than 1%". Reading, after Luong et al. (2015) and Sutskever et al.
(2014) whom the paper follows: no halving while each epoch improves the validation perplexity by at
least the threshold, relative to the previous epoch, ``(ppl[e-1] - ppl[e]) / ppl[e-1]``; the first
epoch that improves by less than that (or gets worse) is halved, and so is every epoch after it,
whatever its loss. A non-improving epoch also restores the best parameters, as in plateau mode
(``--no-restore-best`` gives the literal Luong/Sutskever rule). The first epoch never halves.

Both modes train at each of the ``--halvings`` halved rates (default 8: 1/2 ... 1/256) and stop
at the next decision that would halve once more (the authors' ``decay_count > max_decays``): the
epoch that would need a ninth halved rate is never trained. ``--max-epoch`` stays a cap.

Perplexity and the unit of the loss
-----------------------------------
The scheduler receives the value of ``--best-checkpoint-metric`` (default ``loss``) that fairseq
computed on the first ``--valid-subset``. fairseq's ``loss`` and ``nll_loss`` are in bits (base 2):
per token, or per sentence with ``--sentence-avg`` (where ``nll_loss`` stays per token). Plateau mode
only compares values, so any of them works: for a fixed validation set the per-sentence loss is
the per-token loss times the constant tokens/sentences ratio. The 1% rule needs the per-token
perplexity ``ppl = 2 ** loss``; it is computed as ``1 - 2 ** (loss[e] - loss[e-1])``, which never
overflows. Threshold mode therefore refuses ``--sentence-avg`` with ``--best-checkpoint-metric loss``
(use ``nll_loss``), takes ``ppl`` as a perplexity directly, and refuses any other metric; with a
label-smoothed criterion ``loss`` is the smoothed loss, so ``nll_loss`` is the faithful choice.

Stopping
--------
fairseq-train stops between epochs when the learning rate returned by the scheduler is ``<=
--stop-min-lr`` (fairseq_cli/train.py), and nothing else a scheduler returns can end the loop. After
the last halved rate's non-improving epoch this scheduler sets the learning rate to 0, so
``--stop-min-lr 0`` stops training right there. fairseq's default ``--stop-min-lr`` is -1, which would go on training at learning rate
0 until ``--max-epoch``; the scheduler refuses it with an error naming the flag, and refuses a
``--stop-min-lr`` so large that it would stop before the last halved rate is trained. No number to compute: always
pass ``--stop-min-lr 0``.

Resuming
--------
``state_dict`` holds the learning rate, the number of halvings, the best loss and its epoch, the
threshold mode's state, and the best epoch's parameters (a list of CPU tensors; a checkpoint is
therefore about twice the size of the model with plain SGD). Only tensors, numbers, booleans,
``None``, lists and dicts, for torch's safe loader.

fairseq saves the end-of-epoch checkpoint *before* it hands that epoch's validation loss to the
scheduler (``validate_and_save`` runs inside ``train()``, ``trainer.lr_step`` after it), so the last
decision is missing from ``checkpoint_last.pt``; fairseq's own schedulers lose it on resume. This
one replays it: on loading, it sees that the epoch it was in had finished and been validated, and
reads that epoch's loss from the running best that fairseq restores from the same checkpoint
(``checkpoint_utils.save_checkpoint.best``, the value that also decides ``checkpoint_best.pt``). If
that best fell below the one the scheduler saw after the previous epoch, it *is* the epoch's loss;
if not, the epoch did not improve. The replay happens while fairseq-train loads the checkpoint,
before its first stop test, so re-launching a run that ended with its last halving stops at once
instead of training one more epoch, and a run that was cut off (or stopped at ``--max-epoch``)
continues exactly as if it had not been. The replay needs fairseq's running best to cover
validations at epoch ends only: with mid-epoch validations (``--validate-interval-updates``,
``--save-interval-updates``) it is skipped with a warning, as it is when fairseq does not restore its
best (``--reset-meters``). ``--reset-lr-scheduler`` / ``--reset-optimizer`` start the protocol afresh
from the loaded parameters. When resuming, the learning rate comes from the scheduler's state,
not from ``--lr``.

Optimizer state, devices, precision, distributed training
---------------------------------------------------------
Restoring copies the saved values into the optimizer's parameters in place, so the optimizer, DDP
and the model keep referring to the same tensors. The per-parameter optimizer state (momentum
buffers, Adam moments) belongs to the abandoned trajectory and is cleared on every restore; plain
SGD, the paper's optimizer, has none. With ``--fp16`` the restored values are the fp32 master copy,
which is then copied to the fp16 model. The copy of the best parameters lives on the CPU: it is
used once per epoch at most, costs no accelerator memory, and is already in the form that checkpoints
store. Only what the optimizer holds is kept and restored (the trainable parameters); buffers such
as batch-norm statistics are not (an LSTM language model has none).

Under data-parallel training every rank receives the same validation loss and holds the same
parameters, so every rank takes the same decision and restores the same values: the replicas stay
in sync without communication. On resume every rank gets the same scheduler state and the same
fairseq best from the checkpoint that rank 0 broadcasts. Sharded training (FSDP, ZeRO) is untested.

The paper's PTB medium set-up
-----------------------------
::

    fairseq-train data-bin/ptb --user-dir fairseq_noising \\
        --task noised_language_modeling --noise-scheme kn --noise-gamma 0.2 \\
        --arch noising_lstm_lm_medium \\
        --sentence-avg --batch-size 20 --required-batch-size-multiple 1 --tokens-per-sample 35 \\
        --optimizer sgd --lr 1.0 --clip-norm 5 \\
        --lr-scheduler paper_halving --halvings 8 --stop-min-lr 0 \\
        --max-epoch 200 --no-epoch-checkpoints --save-dir checkpoints/ptb-medium

(``--noise-scheme``/``--noise-gamma``: the scheme and its gamma_0, chosen on the validation set;
``--noise-scheme none`` is the unnoised baseline.) ``--required-batch-size-multiple 1`` matters:
fairseq's default (8) cuts ``--batch-size 20`` batches to 16 sentences. ``--max-epoch`` is only a
safety cap; the halvings end training. The model to evaluate is ``checkpoint_best.pt``.
"""

import logging
import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from omegaconf import II

from fairseq import checkpoint_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler

logger = logging.getLogger(__name__)

_STATE_VERSION = 1
_MISSING = object()
_PPL_METRICS = ("loss", "nll_loss", "ppl")


def _fairseq_best():
    """fairseq's running best validation value (set by ``checkpoint_utils.save_checkpoint``)."""
    return getattr(checkpoint_utils.save_checkpoint, "best", _MISSING)


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
    maximize_best_checkpoint_metric: bool = II(
        "checkpoint.maximize_best_checkpoint_metric"
    )
    save_interval_updates: int = II("checkpoint.save_interval_updates")
    disable_validation: bool = II("dataset.disable_validation")
    validate_interval: int = II("dataset.validate_interval")
    validate_interval_updates: int = II("dataset.validate_interval_updates")
    validate_after_updates: int = II("dataset.validate_after_updates")


@register_lr_scheduler("paper_halving", dataclass=PaperHalvingLRScheduleConfig)
class PaperHalvingLRSchedule(FairseqLRScheduler):
    """Halve the learning rate and restore the best parameters when validation stops improving;
    stop after the N-th halving. See the module docstring for the protocol and its details."""

    def __init__(self, cfg: PaperHalvingLRScheduleConfig, optimizer):
        super().__init__(cfg, optimizer)
        self._check_config(cfg)
        self.threshold = cfg.halving_threshold
        self.restore_best = not cfg.no_restore_best

        self.lr = float(cfg.lr[0])
        self.best = None  # best validation value so far (lower is better)
        self.best_epoch = None
        self.halvings = 0
        self.halving_started = False  # threshold mode: halve after every epoch from now on
        self.last_loss = None  # previous epoch's validation value (threshold mode)
        self.epoch = 0  # last epoch begun
        self.last_step_epoch = None  # last epoch whose validation value was processed
        self.num_updates = 0
        self.fairseq_best = None  # fairseq's running best as seen after the last decision
        self.best_params = None  # list of CPU tensors, aligned with self.optimizer.params

        self._pending_epoch = None  # resume: epoch whose decision the checkpoint lacks
        self._fairseq_best_at_load = _MISSING
        self.optimizer.set_lr(self.lr)

    # ------------------------------------------------------------------ configuration
    @staticmethod
    def _check_config(cfg):
        def fail(msg):
            raise ValueError(f"--lr-scheduler paper_halving: {msg}")

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
        last_lr = cfg.lr[0] * cfg.lr_shrink ** cfg.halvings
        if cfg.stop_min_lr >= last_lr:
            fail(
                f"--stop-min-lr {cfg.stop_min_lr} would stop training before the last halved rate "
                f"(learning rate {last_lr:g} after {cfg.halvings}) is trained; pass --stop-min-lr 0"
            )
        if cfg.disable_validation:
            fail("needs the validation loss after every epoch; drop --disable-validation")
        if cfg.maximize_best_checkpoint_metric:
            fail(
                "halves when a loss stops decreasing; drop --maximize-best-checkpoint-metric "
                f"(--best-checkpoint-metric {cfg.best_checkpoint_metric})"
            )
        if cfg.halving_threshold is not None:
            if not 0.0 < cfg.halving_threshold < 1.0:
                fail(f"--halving-threshold must be in (0, 1) (got {cfg.halving_threshold})")
            if cfg.best_checkpoint_metric not in _PPL_METRICS:
                fail(
                    "--halving-threshold compares validation perplexities, which needs "
                    "--best-checkpoint-metric nll_loss, loss or ppl "
                    f"(got {cfg.best_checkpoint_metric})"
                )
            if cfg.best_checkpoint_metric == "loss" and cfg.sentence_avg:
                fail(
                    "with --sentence-avg the validation 'loss' is per sentence, not the per-token "
                    "log2 perplexity that --halving-threshold needs; add "
                    "--best-checkpoint-metric nll_loss"
                )

    # ------------------------------------------------------------------ fairseq hooks
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
        self.epoch = epoch
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step(self, epoch, val_loss=None):
        """Called by the trainer after each epoch's validation (and with no loss on loading)."""
        if val_loss is None:
            self._maybe_replay(epoch)
        else:
            self._pending_epoch = None
            self.epoch = max(self.epoch, epoch)
            self._decide(epoch, float(val_loss))
            fb = _fairseq_best()
            self.fairseq_best = None if fb is _MISSING else float(fb)
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step_update(self, num_updates):
        """Called by the trainer after each update; the learning rate only changes per epoch."""
        self.num_updates = num_updates
        self.optimizer.set_lr(self.lr)
        return self.lr

    # ------------------------------------------------------------------ the protocol
    @property
    def finished(self):
        """True once the epochs at the last halved rate stopped improving (the rate is then 0)."""
        return self.halvings > self.cfg.halvings

    def _relative_ppl_improvement(self, prev, cur):
        """(ppl_prev - ppl_cur) / ppl_prev, with ppl = 2 ** loss unless the metric is ppl."""
        if prev is None or not math.isfinite(prev):
            return None
        if self.cfg.best_checkpoint_metric == "ppl":
            return (prev - cur) / prev
        # 1 - 2 ** (cur - prev); the clamp keeps expm1 finite, the result is -huge anyway
        return -math.expm1(min(cur - prev, 1000.0) * math.log(2.0))

    def _decide(self, epoch, val, known=True):
        """The end-of-epoch decision. ``known=False``: ``val`` is only known not to improve."""
        if self.finished:
            logger.warning(
                "paper_halving: epoch %d validated after the last halving; ignored", epoch
            )
            self.last_step_epoch = epoch
            return
        prev_best, prev_best_epoch = self.best, self.best_epoch
        improved = not math.isnan(val) and (self.best is None or val < self.best)
        shown = f"{val:.6g}" if known else "(not lower than fairseq's best)"
        if improved:
            self.best, self.best_epoch = val, epoch
            self._snapshot()
        # a tie does not improve (the rate halves), but fairseq's checkpoint_best.pt takes it (its
        # test is <=): the tie becomes the best epoch, so the parameters stay those of that file
        tie = known and not improved and self.best is not None and val == self.best
        if tie:
            self.best_epoch = epoch
            self._snapshot()

        rel = None
        if self.threshold is None:
            halve = not improved
        else:
            rel = self._relative_ppl_improvement(self.last_loss, val)
            if not self.halving_started and (
                not improved or (rel is not None and rel < self.threshold)
            ):
                self.halving_started = True
            halve = self.halving_started
        self.last_loss = val if known else None

        restored = False
        if not improved and not tie and self.restore_best and self.best_params is not None:
            self._restore()
            restored = True

        if improved:
            what = f"improves on {prev_best:.6g}" if prev_best is not None else "is the first"
        elif tie:
            what = (f"equals the best (epoch {prev_best_epoch}) and replaces it in "
                    "checkpoint_best.pt, as fairseq does")
        else:
            what = (
                f"does not improve on {prev_best:.6g} (epoch {prev_best_epoch})"
                if prev_best is not None
                else "is not a number"
            )
        if rel is not None:
            what += f", relative perplexity improvement {rel:.4%}"
        msg = f"paper_halving: epoch {epoch}: valid {self.cfg.best_checkpoint_metric} {shown} {what}"

        if halve:
            old_lr = self.lr
            self.halvings += 1
            if self.finished:
                self.lr = 0.0
                msg += (
                    f"; stop: all {self.cfg.halvings} halvings done: lr {old_lr:g} -> 0"
                    ", training stops (--stop-min-lr)"
                )
            else:
                self.lr = old_lr * self.cfg.lr_shrink
                msg += f"; halving {self.halvings}/{self.cfg.halvings}: lr {old_lr:g} -> {self.lr:g}"
        else:
            msg += f"; lr stays {self.lr:g}"
        if restored:
            msg += f"; restored the parameters of epoch {self.best_epoch}"
        logger.info(msg)
        self.last_step_epoch = epoch

    def _params(self):
        return list(self.optimizer.params)

    def _snapshot(self):
        """Keep a CPU copy of the current parameters (new tensors each time: a checkpoint that
        is still being written asynchronously may hold the previous ones)."""
        if not self.restore_best:
            return
        with torch.no_grad():
            self.best_params = [p.detach().to("cpu", copy=True) for p in self._params()]

    def _restore(self):
        params = self._params()
        with torch.no_grad():
            for p, saved in zip(params, self.best_params):
                p.copy_(saved)
        # --fp16: the optimizer's params are the fp32 master copy; push it to the fp16 model
        if hasattr(self.optimizer, "fp32_params") and hasattr(
            self.optimizer, "_sync_fp32_params_to_fp16"
        ):
            self.optimizer._sync_fp32_params_to_fp16()
        # momentum / Adam moments belong to the abandoned trajectory
        state = getattr(getattr(self.optimizer, "optimizer", None), "state", None)
        if state is not None:
            state.clear()

    # ------------------------------------------------------------------ resuming
    def _validated_at_end_of(self, epoch):
        return (
            epoch % self.cfg.validate_interval == 0
            and self.num_updates >= self.cfg.validate_after_updates
        )

    def _maybe_replay(self, epoch):
        """On resume, apply the decision for the epoch that the checkpoint was saved at the end
        of (fairseq saves before calling ``step``). See the module docstring."""
        pending = self._pending_epoch
        if pending is None:
            return
        if epoch != pending + 1 or not self._validated_at_end_of(pending):
            # a mid-epoch checkpoint (fairseq resumes inside epoch `pending`), or no validation
            self._pending_epoch = None
            return
        fb = _fairseq_best()
        if fb is _MISSING or fb is self._fairseq_best_at_load:
            return  # fairseq has not restored its best from this checkpoint yet; next call
        self._pending_epoch = None
        if self.cfg.validate_interval_updates > 0 or self.cfg.save_interval_updates > 0:
            logger.warning(
                "paper_halving: resuming after epoch %d, whose decision the checkpoint was saved "
                "before; with mid-epoch validations fairseq's best validation value does not give "
                "that epoch's loss, so the decision is not replayed",
                pending,
            )
            return
        fb = float(fb)
        seen = self.fairseq_best
        logger.info(
            "paper_halving: resuming after epoch %d, saved before its decision; replaying it "
            "from fairseq's best validation value %.6g",
            pending,
            fb,
        )
        if seen is None or fb < seen:
            self._decide(pending, fb)
        else:
            self._decide(pending, math.inf, known=False)
        self.fairseq_best = fb

    def state_dict(self):
        return {
            "version": _STATE_VERSION,
            "lr": self.lr,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "halvings": self.halvings,
            "halving_started": self.halving_started,
            "last_loss": self.last_loss,
            "epoch": self.epoch,
            "last_step_epoch": self.last_step_epoch,
            "num_updates": self.num_updates,
            "fairseq_best": self.fairseq_best,
            "best_params": list(self.best_params) if self.best_params is not None else None,
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
        self.halvings = int(state_dict["halvings"])
        self.halving_started = bool(state_dict["halving_started"])
        self.last_loss = state_dict["last_loss"]
        self.epoch = int(state_dict["epoch"])
        self.last_step_epoch = state_dict["last_step_epoch"]
        self.num_updates = int(state_dict["num_updates"])
        self.fairseq_best = state_dict["fairseq_best"]
        self.best_params = self._load_params(state_dict["best_params"])
        if self.best is not None and self.best_params is None and self.restore_best:
            logger.warning(
                "paper_halving: the checkpoint holds no copy of the best parameters "
                "(saved with --no-restore-best?); they cannot be restored until the next "
                "improvement"
            )
        if self.finished:
            self.lr = 0.0  # the run had ended, or --halvings was lowered on resume
        last = self.last_step_epoch if self.last_step_epoch is not None else 0
        self._pending_epoch = self.epoch if self.epoch > last else None
        self._fairseq_best_at_load = _fairseq_best()
        self.optimizer.set_lr(self.lr)

    def _load_params(self, saved):
        if saved is None or not self.restore_best:
            return None
        params = self._params()
        if len(saved) != len(params) or any(
            s.shape != p.shape for s, p in zip(saved, params)
        ):
            raise ValueError(
                "--lr-scheduler paper_halving: the best parameters in the checkpoint do not match "
                f"the model ({len(saved)} tensors for {len(params)} parameters); pass "
                "--reset-lr-scheduler to start the protocol afresh"
            )
        return [s.detach().to(device="cpu", dtype=p.dtype, copy=True) for s, p in zip(saved, params)]
