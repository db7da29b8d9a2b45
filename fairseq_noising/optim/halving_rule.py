"""The decisions of ``--lr-scheduler paper_halving``, from its validations alone, the
configurations it refuses and its log lines (no fairseq).

A validation is ``{"epoch", "loss", "updates", "inside"}``: the value of
``--best-checkpoint-metric`` after an epoch (``inside``: at a save inside an epoch, seen only when
resuming from it), and the number of updates then. :func:`decide` takes one into a
:class:`Progress`; the scheduler's state is the list of them, and :func:`replay` gives what they
decided. The rules are in docs/paper_halving.md.
"""

import math
from dataclasses import dataclass
from typing import List, NamedTuple, Optional

from fairseq_noising.errors import NoisingError


@dataclass
class Progress:
    """What the validations so far decided."""

    halvings: int = 0
    started: bool = False  # threshold rule: halve after every epoch from now on
    best: Optional[dict] = None  # the best validation: its parameters are the ones restored
    last: Optional[float] = None  # the previous epoch's loss (threshold rule)


class Decision(NamedTuple):
    kind: str  # first, improves, tie, worse, nan; inside, inside-best; ignored (after the end)
    halve: bool = False
    rel: Optional[float] = None  # threshold rule: the relative perplexity improvement
    previous: Optional[dict] = None  # the best before
    held: bool = False  # it would halve, but comes before --halving-start-epoch


def decide(p: Progress, v: dict, cfg) -> Decision:
    """Takes the validation ``v`` into ``p`` (``cfg``: the scheduler's config).

    At an epoch's end: an improvement becomes the best; otherwise the rate halves (the threshold
    rule: from the first epoch that improves by less than ``halving_threshold`` on, every
    epoch), but not before ``halving_start_epoch`` (``held``). A tie also becomes the best,
    because fairseq's ``checkpoint_best.pt`` takes it (its test is <=). Inside an epoch: a value
    not above the best becomes the best (fairseq wrote ``checkpoint_best.pt`` there), nothing
    else changes. After the last halving: ignored."""
    prev, loss = p.best, v["loss"]
    if p.halvings > cfg.halvings:
        return Decision("ignored", previous=prev)
    if v.get("inside"):
        if prev is None or not loss <= prev["loss"]:
            return Decision("inside", previous=prev)
        p.best = v
        return Decision("inside-best", previous=prev)
    improved = not math.isnan(loss) and (prev is None or loss < prev["loss"])
    tie = not improved and prev is not None and loss == prev["loss"]
    if improved or tie:
        p.best = v
    rel, waiting = None, v.get("epoch") is not None and v["epoch"] < cfg.halving_start_epoch
    if cfg.halving_threshold is None:
        due = not improved
    else:
        rel = relative_ppl_improvement(p.last, loss, cfg.best_checkpoint_metric)
        due = p.started or not improved or (rel is not None and rel < cfg.halving_threshold)
    halve, held = due and not waiting, due and waiting
    p.started |= halve and cfg.halving_threshold is not None
    p.last = loss
    p.halvings += halve
    if improved:
        return Decision("improves" if prev else "first", halve, rel, prev, held)
    return Decision("tie" if tie else "worse" if prev else "nan", halve, rel, prev, held)


def replay(validations: List[dict], cfg) -> Progress:
    """What ``validations`` decided, in order."""
    p = Progress()
    for v in validations:
        decide(p, v, cfg)
    return p


def rate(cfg, halvings: int) -> float:
    """The learning rate after ``halvings`` halvings of ``--lr``; 0 after the last."""
    lr = float(cfg.lr[0])
    for _ in range(halvings):
        lr *= cfg.lr_shrink
    return 0.0 if halvings > cfg.halvings else lr


def relative_ppl_improvement(prev, cur, metric) -> Optional[float]:
    """(ppl_prev - ppl_cur) / ppl_prev, with ppl = 2 ** loss unless the metric is ppl."""
    if prev is None or not math.isfinite(prev):
        return None
    if metric == "ppl":
        return (prev - cur) / prev
    # 1 - 2 ** (cur - prev); the clamp keeps expm1 finite, the result is -huge anyway
    return -math.expm1(min(cur - prev, 1000.0) * math.log(2.0))


def from_version_2(state: dict) -> List[dict]:
    """Validations that decide what a state of version 1 or 2 (which held the decisions'
    outcome: best, best_epoch, best_updates, halvings, last_step_epoch, ...) had decided: its
    best epoch, then one non-improving epoch (a loss that is not a number) per halving."""
    best = []
    if state["best"] is not None:
        best = [dict(epoch=state["best_epoch"], loss=float(state["best"]), inside=False)]
        best[0]["updates"] = state.get("best_updates")  # version 1: unknown
    worse = dict(epoch=state["last_step_epoch"], loss=math.nan, updates=None, inside=False)
    return best + [dict(worse) for _ in range(int(state["halvings"]))]


def refusal(message: str) -> NoisingError:
    """The one line that refuses a command line (or a resume) on which the protocol cannot work."""
    return NoisingError(f"--lr-scheduler paper_halving: {message}")


def refuse_unworkable(cfg):
    """Refuses, in one line naming the flag, a scheduler config (``cfg``) on which the rule cannot
    work; the trainer's other settings are checked by :func:`.best_params.on_load_checkpoint`."""
    if len(cfg.lr) != 1:
        raise refusal(
            f"give a single --lr (got {list(cfg.lr)}); the schedule is made by halving it"
        )
    if cfg.halvings < 1:
        raise refusal(f"--halvings must be >= 1 (got {cfg.halvings})")
    if cfg.halving_start_epoch < 1:
        raise refusal(f"--halving-start-epoch must be >= 1 (got {cfg.halving_start_epoch})")
    if not 0.0 < cfg.lr_shrink < 1.0:
        raise refusal(f"--lr-shrink must be in (0, 1) (got {cfg.lr_shrink})")
    if cfg.stop_min_lr < 0:
        raise refusal(
            "pass --stop-min-lr 0: after the last halving the scheduler sets the learning rate "
            "to 0 and fairseq-train stops only when it is <= --stop-min-lr "
            f"(got --stop-min-lr {cfg.stop_min_lr})"
        )
    last_lr = cfg.lr[0] * cfg.lr_shrink**cfg.halvings
    if cfg.stop_min_lr >= last_lr:
        raise refusal(
            f"--stop-min-lr {cfg.stop_min_lr} would stop training before the last halved rate "
            f"(learning rate {last_lr:g} after {cfg.halvings}) is trained; pass --stop-min-lr 0"
        )
    metric, threshold = cfg.best_checkpoint_metric, cfg.halving_threshold
    if cfg.maximize_best_checkpoint_metric:
        raise refusal(
            "halves when a loss stops decreasing; drop --maximize-best-checkpoint-metric "
            f"(--best-checkpoint-metric {metric})"
        )
    if threshold is not None and not 0.0 < threshold < 1.0:
        raise refusal(f"--halving-threshold must be in (0, 1) (got {threshold})")
    if threshold is not None and metric not in ("loss", "nll_loss", "ppl"):
        raise refusal(
            "--halving-threshold compares validation perplexities, which needs "
            f"--best-checkpoint-metric nll_loss, loss or ppl (got {metric})"
        )
    if threshold is not None and metric == "loss" and cfg.sentence_avg:
        raise refusal(
            "with --sentence-avg the validation 'loss' is per sentence, not the per-token "
            "log2 perplexity that --halving-threshold needs; add --best-checkpoint-metric nll_loss"
        )


def describe(v: dict, d: Decision, p: Progress, cfg, lr_before: float, restored: bool) -> str:
    """The log line of a decision that changed the best or the rate (``restored``: the best
    parameters were restored)."""
    prev, metric = d.previous, cfg.best_checkpoint_metric
    if d.kind == "inside-best":
        return (
            f"paper_halving: resuming at update {v['updates']} inside epoch {v['epoch']}, "
            f"where it validated at {metric} {v['loss']:.6g} and fairseq wrote "
            f"checkpoint_best.pt (best so far {prev['loss']:.6g} at epoch {prev['epoch']}): it "
            "becomes the best, restored after a non-improving epoch"
        )
    if d.kind == "first":
        what = "is the first"
    elif d.kind == "improves":
        what = f"improves on {prev['loss']:.6g}"
    elif d.kind == "tie":
        what = (
            f"equals the best (epoch {prev['epoch']}) and replaces it in checkpoint_best.pt, "
            "as fairseq does"
        )
    elif d.kind == "worse":
        what = f"does not improve on {prev['loss']:.6g} (epoch {prev['epoch']})"
    else:
        what = "is not a number"
    if d.rel is not None:
        what += f", relative perplexity improvement {d.rel:.4%}"
    msg = f"paper_halving: epoch {v['epoch']}: valid {metric} {v['loss']:.6g} {what}"
    if d.held:
        msg += (
            f"; lr stays {lr_before:g}, parameters kept: the rule decides from epoch "
            f"{cfg.halving_start_epoch} on (--halving-start-epoch)"
        )
    elif not d.halve:
        msg += f"; lr stays {lr_before:g}"
    elif p.halvings > cfg.halvings:
        msg += (
            f"; stop: all {cfg.halvings} halvings done: lr {lr_before:g} -> 0, training stops "
            "(--stop-min-lr)"
        )
    else:
        msg += (
            f"; halving {p.halvings}/{cfg.halvings}: lr {lr_before:g} -> {rate(cfg, p.halvings):g}"
        )
    return msg + (f"; restored the parameters of epoch {p.best['epoch']}" if restored else "")
