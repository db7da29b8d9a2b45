"""The decisions of ``--lr-scheduler paper_halving``, from its validations alone (no fairseq).

A validation is ``{"epoch", "loss", "updates", "inside"}``: the value of
``--best-checkpoint-metric`` after an epoch (``inside``: at a save inside an epoch, seen only when
resuming from it), and the number of updates then. :func:`decide` takes one into a
:class:`Progress`; the scheduler's state is the list of them, and :func:`replay` gives what they
decided. The rules are in docs/paper_halving.md.
"""

import math
from dataclasses import dataclass
from typing import List, NamedTuple, Optional


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


def decide(p: Progress, v: dict, cfg) -> Decision:
    """Takes the validation ``v`` into ``p`` (``cfg``: the scheduler's config).

    At an epoch's end: an improvement becomes the best; otherwise the rate halves (the threshold
    rule: from the first epoch that improves by less than ``halving_threshold`` on, every
    epoch). A tie also becomes the best, because fairseq's ``checkpoint_best.pt`` takes it (its
    test is <=). Inside an epoch: a value not above the best becomes the best (fairseq wrote
    ``checkpoint_best.pt`` there), nothing else changes. After the last halving: ignored."""
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
    rel = None
    if cfg.halving_threshold is None:
        halve = not improved
    else:
        rel = relative_ppl_improvement(p.last, loss, cfg.best_checkpoint_metric)
        p.started |= not improved or (rel is not None and rel < cfg.halving_threshold)
        halve = p.started
    p.last = loss
    p.halvings += halve
    if improved:
        return Decision("improves" if prev else "first", halve, rel, prev)
    return Decision("tie" if tie else "worse" if prev else "nan", halve, rel, prev)


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


def describe(v: dict, d: Decision, p: Progress, cfg, lr_before: float) -> str:
    """The log line of an end-of-epoch decision (without what was restored)."""
    prev = d.previous
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
    msg = f"paper_halving: epoch {v['epoch']}: valid {cfg.best_checkpoint_metric} {v['loss']:.6g} {what}"
    lr = rate(cfg, p.halvings)
    if not d.halve:
        return msg + f"; lr stays {lr_before:g}"
    if p.halvings > cfg.halvings:
        return msg + (
            f"; stop: all {cfg.halvings} halvings done: lr {lr_before:g} -> 0, training stops "
            "(--stop-min-lr)"
        )
    return msg + f"; halving {p.halvings}/{cfg.halvings}: lr {lr_before:g} -> {lr:g}"
