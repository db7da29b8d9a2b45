"""How far a row's training got, from what fairseq and the scheduler store, never from log prose.

Two sources, both structured:

- ``checkpoint_last.pt``: where the training is (the epoch iterator's position and the number of
  updates), its cumulative training time (``extra_state["previous_training_time"]``, the clock of
  ``--stop-time-hours``), the last validation's value (``extra_state["val_loss"]``) and, for
  ``paper_halving``, the scheduler's validations, whose replay gives the halvings and whether
  the protocol has ended (:mod:`fairseq_noising.optim.halving_rule`);
- fairseq's json log (``common.log_format: json``; the configs of ``recipes/config`` set it): one
  JSON object per validation (tag ``valid``), per epoch (``train``) and per logged update
  (``train_inner``), for the per-epoch series and the position of a training still running.

A run trained before its configs logged json has a ``simple`` log; its series come from
:mod:`fairseq_noising.analysis.logs`, the one module that reads old logs.

How a training ended (:func:`training`'s ``stop``) follows from these facts and the row's config,
by fairseq's own stop tests: ``halvings`` (paper_halving's last halved rate trained),
``patience`` (``checkpoint.patience`` validations without improving on the best),
``max_update``, ``time`` (``optimization.stop_time_hours``), ``max_epoch`` (the epoch count
capped it), or None (not ended, or for a reason no fact shows).

The facts only the checkpoint holds (:data:`AT_END`) are kept in the row's record when its
training returns (``row.json``'s ``at_end``): a row whose checkpoints are gone (deleted to save
space, left out of an archive) still says how it ended.
"""

import json
import os
import re
from types import SimpleNamespace
from typing import Dict, List, Optional

LOG = "hydra_train.log"  # what fairseq-hydra-train writes into the row's folder
CHECKPOINT = "checkpoint_last.pt"
AT_END = ("halvings", "stop", "lr", "wall_seconds", "resume_at")  # facts of checkpoint_last.pt
# a json record of fairseq's progress bar, as Hydra's job logging prints it: [time][TAG][LEVEL] - {
_JSON_LINE = re.compile(r"^\[[^\]]*\]\[(valid|train|train_inner)\]\[[A-Z]+\] - (\{.*\})\s*$")


def json_log(path: str) -> Optional[Dict]:
    """The series of a json log: ``valid`` (every validation, in order), ``train`` (per epoch)
    and the last ``train_inner`` record; None when the log holds no json record."""
    out: Dict = {"valid": [], "train": {}, "inner": None}
    found = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _JSON_LINE.match(line)
            if not m:
                continue
            try:
                rec = json.loads(m.group(2))
            except ValueError:
                continue
            found = True
            tag = m.group(1)
            if tag == "valid":
                out["valid"].append(rec)
            elif tag == "train":
                out["train"][int(rec["epoch"])] = rec
            else:
                out["inner"] = rec
    return out if found else None


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
    import torch

    from .. import fairseq_compat
    from ..checkpoint_safety import allow_fairseq_checkpoints

    allow_fairseq_checkpoints()
    try:  # mmap: the tensors are not read
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # being written, or damaged: the json log still tells
        return None
    history = (state.get("optimizer_history") or [{}])[-1]
    extra = state.get("extra_state") or {}
    facts = fairseq_compat.checkpoint_position(state)
    facts["seconds"] = extra.get("previous_training_time")
    facts["scheduler"] = history.get("lr_scheduler_state")
    return facts


def halving_progress(cfg: Dict, saved: Optional[Dict]):
    """``(halvings, ended)`` of a paper_halving row from its checkpoint: the scheduler's
    validations replayed, with the end-of-epoch validation that fairseq saved before handing
    it to the scheduler (the scheduler replays it the same way when it resumes)."""
    from ..optim import halving_rule

    sched = dict(cfg["lr_scheduler"])
    rule_cfg = SimpleNamespace(
        halvings=int(sched.get("halvings", 8)),
        halving_threshold=sched.get("halving_threshold"),
        lr=list(cfg["optimization"]["lr"]),
        lr_shrink=float(sched.get("lr_shrink", 0.5)),
        best_checkpoint_metric=cfg["checkpoint"].get("best_checkpoint_metric", "loss"),
    )
    state = (saved or {}).get("scheduler") or {}
    validations = [dict(v) for v in state.get("validations") or []]
    if saved and saved["loss"] is not None and saved["epoch"] is not None and not saved["inside"]:
        if not any(not v["inside"] and v["epoch"] >= saved["epoch"] for v in validations):
            validations.append(dict(epoch=saved["epoch"], loss=saved["loss"], inside=False))
    p = halving_rule.replay(validations, rule_cfg)
    return p.halvings, p.halvings > rule_cfg.halvings


def _patience_ran_out(values: List[float], patience: int, maximize: bool) -> bool:
    """fairseq's ``should_stop_early`` over every validation's metric, in order."""
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
    (a process killed between that save and the summary logs no summary for it)."""
    epochs = [int(r["epoch"]) for r in series["valid"]] + list(series["train"])
    if series["inner"]:
        epochs.append(int(series["inner"]["epoch"]))
    latest = max(epochs, default=0)
    finished = set(series["train"]) | {e for e in epochs if e < latest}
    if saved and saved["epoch"] is not None and not saved["inside"]:
        finished.add(saved["epoch"])
    return finished


def training(run_dir: str, cfg: Dict, at_end: Optional[Dict] = None) -> Dict:
    """How far the row's training got: the epochs trained (and validated at their end); per
    finished epoch fairseq's validation and training perplexities and learning rate; the last
    validation (inside an epoch, with --save-interval-updates); the position, the halvings, the
    learning rate now, why it stopped and its cumulative training time. Without a
    checkpoint_last.pt, ``at_end`` (what it said when the training returned) gives those of
    :data:`AT_END`."""
    path = os.path.join(run_dir, LOG)
    series = json_log(path) if os.path.isfile(path) else None
    if series is None and os.path.isfile(path):
        return _from_old_log(path, cfg)
    series = series or {"valid": [], "train": {}, "inner": None}
    saved = checkpoint(run_dir)
    train = series["train"]
    finished = _finished_epochs(series, saved)
    valid_ppl: Dict[str, float] = {}
    for rec in series["valid"]:  # a finished epoch's last validation: the one at its end
        if int(rec["epoch"]) in finished:
            valid_ppl[str(int(rec["epoch"]))] = _num(rec, "valid_ppl")
    last_valid = _num(series["valid"][-1], "valid_ppl") if series["valid"] else None
    train_ppl = {str(e): _num(r, "train_ppl") for e, r in sorted(train.items())}
    train_lr = {str(e): _num(r, "train_lr") for e, r in sorted(train.items())}
    sched, opt = cfg.get("lr_scheduler") or {}, cfg.get("optimization") or {}
    halving = sched.get("_name") == "paper_halving"
    halvings, ended = halving_progress(cfg, saved) if halving else (None, False)
    inner, last_epoch = series["inner"], max(finished, default=0)
    done, lr = float(last_epoch), _num(train.get(last_epoch), "train_lr")
    if inner and (_num(inner, "update") or 0) > last_epoch:  # inside an epoch (still running?)
        done, lr = _num(inner, "update"), _num(inner, "lr")
    updates = saved["updates"] if saved else None
    seconds = saved["seconds"] if saved else None
    stop = None
    metric = (cfg.get("checkpoint") or {}).get("best_checkpoint_metric", "loss")
    values = [_num(r, f"valid_{metric}") for r in series["valid"]]
    if ended:
        stop = "halvings"
    elif (opt.get("max_update") or 0) > 0 and (updates or 0) >= opt["max_update"]:
        stop = "max_update"
    elif (opt.get("stop_time_hours") or 0) > 0 and (seconds or 0) >= opt["stop_time_hours"] * 3600:
        stop = "time"
    elif _patience_ran_out(
        [v for v in values if v is not None],
        int((cfg.get("checkpoint") or {}).get("patience", -1) or -1),
        bool((cfg.get("checkpoint") or {}).get("maximize_best_checkpoint_metric")),
    ):
        stop = "patience"
    elif (opt.get("max_epoch") or 0) > 0 and last_epoch >= opt["max_epoch"]:
        stop = "max_epoch"
    if ended:
        lr = 0.0  # the scheduler's rate after the last halving
    facts = {
        "epochs": len(valid_ppl),
        "epochs_done": round(done, 3),
        "valid_ppl": valid_ppl,
        "last_valid_ppl": last_valid,
        "train_ppl": train_ppl,
        "train_lr": train_lr,
        "halvings": min(halvings, int(sched.get("halvings", 8))) if halving else None,
        "max_halvings": int(sched.get("halvings", 8)) if halving else None,
        "lr": lr,
        "stop": stop,
        "wall_seconds": seconds,
        "resume_at": saved["where"] if saved else None,
    }
    if saved is None and at_end:
        facts.update({k: at_end[k] for k in AT_END if k in at_end})
    return facts


def _from_old_log(path: str, cfg: Dict) -> Dict:
    """A run that logged in fairseq's ``simple`` format (before the configs set json)."""
    from ..analysis import logs

    log = logs.read_log(path)
    sched = cfg.get("lr_scheduler") or {}
    halving = sched.get("_name") == "paper_halving"
    return {
        "epochs": len(log.valid_ppl),
        "epochs_done": round(log.epochs_done, 3),
        "valid_ppl": {str(e): p for e, p in sorted(log.valid_ppl.items())},
        "last_valid_ppl": log.valid_ppl[max(log.valid_ppl)] if log.valid_ppl else None,
        "train_ppl": {str(e): p for e, p in sorted(log.train_ppl.items())},
        "train_lr": {str(e): r for e, r in sorted(log.lr.items())},
        "halvings": log.halvings if halving else None,
        "max_halvings": int(sched.get("halvings", 8)) if halving else None,
        "lr": log.current_lr,
        "stop": None,
        "wall_seconds": log.wall_seconds,
        "resume_at": None,
    }
