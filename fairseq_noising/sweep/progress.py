"""How far a row's training got, from what fairseq, the scheduler and the row store, never from
log lines.

The sources (``checkpoint_last.pt``, the row's progress file) and how a training ended
(:func:`training`'s ``stop``): docs/sweeps.md, "Where each fact is". The facts only the checkpoint
holds (:data:`AT_END`) are kept in ``row.json``'s ``at_end`` when the training returns.
"""

import dataclasses
import os
import statistics
from types import SimpleNamespace
from typing import Dict, List, Optional

from . import events

CHECKPOINT = "checkpoint_last.pt"
AT_END = ("halvings", "stop", "lr", "training_seconds", "resume_at", "saved_epoch", "saved_inside")


def _num(rec: Optional[Dict], key: str) -> Optional[float]:
    try:
        return float(rec[key])
    except (TypeError, KeyError, ValueError):
        return None


def checkpoint(run_dir: str) -> Optional[Dict]:
    """What ``checkpoint_last.pt`` says (:func:`fairseq_compat.checkpoint_position` plus the
    training time and the scheduler's state), or None without one."""
    path = os.path.join(run_dir, CHECKPOINT)
    if not os.path.isfile(path):
        return None
    from .. import fairseq_compat
    from ..checkpoint_safety import read_checkpoint

    try:  # mmap: the tensors are not read
        state = read_checkpoint(path)
    except Exception:  # being written, or damaged: the json log still tells
        return None
    history = (state.get("optimizer_history") or [{}])[-1]
    extra = state.get("extra_state") or {}
    facts = fairseq_compat.checkpoint_position(state)
    facts["seconds"] = extra.get("previous_training_time")
    facts["scheduler"] = history.get("lr_scheduler_state")
    return facts


def _scheduler(cfg: Dict) -> Dict:
    """paper_halving's settings of the row: its config's, with the scheduler's defaults for a
    field an older config lacks."""
    from ..optim.paper_halving import PaperHalvingLRScheduleConfig

    fields = {f.name: f.default for f in dataclasses.fields(PaperHalvingLRScheduleConfig)}
    return {**fields, **(cfg.get("lr_scheduler") or {})}


def halving_progress(cfg: Dict, saved: Optional[Dict]):
    """``(halvings, ended, lr)`` of a paper_halving row from its checkpoint: the scheduler's
    validations replayed, with the end-of-epoch validation that fairseq saved before handing
    it to the scheduler (the scheduler replays it the same way when it resumes); ``lr``: the
    rate they leave for the next epoch."""
    from ..optim import halving_rule

    sched = _scheduler(cfg)
    rule_cfg = SimpleNamespace(
        halvings=int(sched["halvings"]),
        halving_threshold=sched["halving_threshold"],
        halving_start_epoch=int(sched["halving_start_epoch"]),
        lr=list(cfg["optimization"]["lr"]),
        lr_shrink=float(sched["lr_shrink"]),
        best_checkpoint_metric=cfg["checkpoint"]["best_checkpoint_metric"],
    )
    state = (saved or {}).get("scheduler") or {}
    validations = [dict(v) for v in state.get("validations") or []]
    if saved and saved["loss"] is not None and saved["epoch"] is not None and not saved["inside"]:
        if not any(not v["inside"] and v["epoch"] >= saved["epoch"] for v in validations):
            validations.append(dict(epoch=saved["epoch"], loss=saved["loss"], inside=False))
    p = halving_rule.replay(validations, rule_cfg)
    return p.halvings, p.halvings > rule_cfg.halvings, halving_rule.rate(rule_cfg, p.halvings)


def _patience_ran_out(values: List[float], patience: int, maximize: bool) -> bool:
    """fairseq's ``should_stop_early`` over one process's validations, in order."""
    if patience <= 0 or not values:
        return False
    best, runs = None, 0
    for v in values:
        if best is None or (v > best if maximize else v < best):
            best, runs = v, 0
        else:
            runs += 1
    return runs >= patience


def _finished_epochs(series: Dict, saved: Optional[Dict]) -> set:
    """The epochs trained to their end: those with fairseq's epoch summary (``train``), those
    that a later epoch's record follows, and the one checkpoint_last.pt was saved at the end of
    (a process killed between that save and the summary reports no summary for it), but not
    one it was saved inside."""
    epochs = [int(r["epoch"]) for r in series["valid"]] + list(series["train"])
    if series["inner"]:
        epochs.append(int(series["inner"]["epoch"]))
    latest = max(epochs, default=0)
    finished = set(series["train"]) | {e for e in epochs if e < latest}
    if saved and saved["epoch"] is not None:
        # saved inside an epoch (a stop by --max-update or the time budget, whose summary fairseq
        # printed all the same): that epoch goes on
        (finished.discard if saved["inside"] else finished.add)(saved["epoch"])
    return finished


def _trained_nothing(run: Dict) -> bool:
    """A process that resumed a row and recorded nothing after its start (a training log
    imported with ``--import-logs`` keeps the start of a command run again on an ended row)."""
    return run["from"] is not None and run["last"] == run["started"] and not run["validations"]


def _runs(runs: List[Dict], ended: bool = False) -> Dict:
    """The processes that trained the row: how many resumed it, how many started it again from
    scratch, when each stopped (a start without an end; not the last one of a row whose
    training ``ended``: an imported log has no end), and the wall time from the first start to
    the last event."""
    resumed = sum(r["from"] is not None for r in runs)
    restarts = sum(r["from"] is None for r in runs[1:])
    stopped = runs[:-1] if ended else runs
    stops = [dict(at=r["last"], started=r["started"]) for r in stopped if r["ended"] is None]
    wall = runs[-1]["last"] - runs[0]["started"] if runs else None
    return {
        "count": len(runs),
        "resumed": resumed,
        "restarts": restarts,
        "stops": stops,
        "wall_seconds": wall,
        "list": runs,
    }


def training(run_dir: str, cfg: Dict, at_end: Optional[Dict] = None) -> Dict:
    """How far the row's training got: the epochs trained (and validated at their end); per
    finished epoch fairseq's validation and training perplexities and learning rate, and the
    median of their training times (``epoch_seconds``: fairseq's ``train_wall``); the last
    validation; the position, the halvings, the learning rate now, why it stopped, its
    cumulative training time (fairseq's clock) and wall time, and the processes that trained
    it (``runs``; ``recorded``: False for a row without a progress file). Without a
    checkpoint_last.pt, ``at_end`` (what it said when the training returned) gives those of
    :data:`AT_END`."""
    found = events.read(run_dir)
    series = events.series(found or [])
    saved = checkpoint(run_dir)
    kept = None  # without the checkpoint: where the record says it was saved
    if saved is None and at_end and at_end.get("saved_epoch") is not None:
        kept = {"epoch": at_end["saved_epoch"], "inside": at_end.get("saved_inside")}
    train = series["train"]
    finished = _finished_epochs(series, saved or kept)
    valid_ppl: Dict[str, float] = {}
    for rec in series["valid"]:  # a finished epoch's last validation: the one at its end
        if int(rec["epoch"]) in finished:
            valid_ppl[str(int(rec["epoch"]))] = _num(rec, "ppl")
    last_valid = _num(series["valid"][-1], "ppl") if series["valid"] else None
    train_ppl = {str(e): _num(r, "ppl") for e, r in sorted(train.items())}
    train_lr = {str(e): _num(r, "lr") for e, r in sorted(train.items())}
    walls = [_num(r, "train_wall") for e, r in train.items() if e in finished]
    walls = [w for w in walls if w]  # fairseq's train_wall: an epoch's training time
    opt, ckpt = cfg.get("optimization") or {}, cfg.get("checkpoint") or {}
    halving = (cfg.get("lr_scheduler") or {}).get("_name") == "paper_halving"
    max_halvings = int(_scheduler(cfg)["halvings"]) if halving else None
    halvings, ended, next_lr = halving_progress(cfg, saved) if halving else (None, False, None)
    inner, last_epoch = series["inner"], max(finished, default=0)
    done, lr = float(last_epoch), _num(train.get(last_epoch), "lr")
    if inner and (_num(inner, "position") or 0) > last_epoch:  # inside an epoch
        done, lr = _num(inner, "position"), _num(inner, "lr")
    elif halving and saved and last_epoch:  # between epochs: the rate the next one trains at
        lr = next_lr
    updates = saved["updates"] if saved else None
    seconds = saved["seconds"] if saved else None
    metric = ckpt.get("best_checkpoint_metric", "loss")
    last_run = series["runs"][-1]["validations"] if series["runs"] else series["valid"]
    values = [_num(r, metric) for r in last_run]
    stop = None
    if ended:
        stop = "halvings"
    elif (opt.get("max_update") or 0) > 0 and (updates or 0) >= opt["max_update"]:
        stop = "max_update"
    elif (opt.get("stop_time_hours") or 0) > 0 and (seconds or 0) >= opt["stop_time_hours"] * 3600:
        stop = "time"
    elif _patience_ran_out(
        [v for v in values if v is not None],
        int(ckpt.get("patience") or -1),
        bool(ckpt.get("maximize_best_checkpoint_metric")),
    ):
        stop = "patience"
    elif (opt.get("max_epoch") or 0) > 0 and last_epoch >= opt["max_epoch"]:
        stop = "max_epoch"
    if ended:
        lr = 0.0  # the scheduler's rate after the last halving
    trained = series["runs"]
    if saved is None and at_end and "stop" in at_end:  # the checkpoint is gone: as it said
        stop = at_end["stop"]
    while stop and len(trained) > 1 and _trained_nothing(trained[-1]):
        trained = trained[:-1]  # started again after the row had ended: no resume
    runs = _runs(trained, ended=bool(stop))
    facts = {
        "recorded": (found[0]["tag"] != "imported" or "imported") if found else False,
        "epochs": len(valid_ppl),
        "epochs_done": round(done, 3),
        "valid_ppl": valid_ppl,
        "last_valid_ppl": last_valid,
        "train_ppl": train_ppl,
        "train_lr": train_lr,
        "epoch_seconds": statistics.median(walls) if walls else None,
        "halvings": min(halvings, max_halvings) if halving else None,
        "max_halvings": max_halvings,
        "lr": lr,
        "stop": stop,
        "training_seconds": seconds,
        "wall_seconds": runs["wall_seconds"],
        "runs": runs,
        "resume_at": saved["where"] if saved else None,
        "saved_epoch": saved["epoch"] if saved else None,
        "saved_inside": bool(saved["inside"]) if saved else None,
    }
    if saved is None and at_end:
        facts.update({k: at_end[k] for k in AT_END if k in at_end})
    return facts
