"""A sweep row's progress file, ``progress.jsonl``: one JSON object a line, appended as it happens.

The row's callback writes ``start`` (with the checkpoint position it resumes from, or null: from
scratch) and ``end`` (the job's status); between them, what fairseq's progress bars report,
whatever the log format (:func:`fairseq_noising.fairseq_compat.training.recorded_progress`):
``train_inner`` every ``--log-interval`` updates (with ``position``, epochs done), ``train`` at
an epoch's end, and each validation under its subset's name (``valid``). Statistics keep
fairseq's names (``loss`` in bits, ``ppl``, ``lr``, ``num_updates``, ...). Every line has its
``time`` (seconds since the epoch). A process that is killed leaves a start without an end.
"""

import json
import os
import time
from typing import Dict, List, Optional

FILE = "progress.jsonl"
TRAINING = ("train_inner", "train")


def append(run_dir: str, event: Dict) -> None:
    line = json.dumps({**event, "time": round(time.time(), 3)}) + "\n"
    with open(os.path.join(run_dir, FILE), "a", encoding="utf-8") as f:
        f.write(line)  # one write of one line: rows never share a file


def read(run_dir: str) -> Optional[List[Dict]]:
    """The events in order (a line cut short by a killed process is skipped); None: no file."""
    try:
        with open(os.path.join(run_dir, FILE), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and "tag" in event:
            events.append(event)
    return events


def series(events: List[Dict], subset: str = "valid") -> Dict:
    """The training that the row's checkpoints continue: ``valid`` (every validation, in
    order), ``train`` (per epoch), ``inner`` (the last ``train_inner``), and ``runs``: one per
    process that trained it (``started``, ``from``: the position resumed from or None,
    ``last``: the time of its last event, ``ended``: its end's time or None when it was
    stopped, ``status``, ``validations``: its validations' values in order). A start from
    scratch drops what came before (its runs stay, marked ``dropped``); a resume drops the
    records past the updates it resumes from (work after the last save, lost by a stop)."""
    out: Dict = {"valid": [], "train": {}, "inner": None, "runs": []}
    for e in events:
        tag = e["tag"]
        if tag == "start":
            at = e.get("from")
            for run in out["runs"]:
                run["dropped"] = run.get("dropped") or at is None
            if at is None:
                out.update(valid=[], train={}, inner=None)
            else:
                _drop_after(out, at.get("updates") or 0)
            out["runs"].append(dict(started=e["time"], last=e["time"], ended=None, status=None))
            out["runs"][-1].update({"from": at, "validations": [], "dropped": False})
            continue
        run = out["runs"][-1] if out["runs"] else None
        if run is not None:
            run["last"] = e["time"]
        if tag == "end":
            if run is not None:
                run.update(ended=e["time"], status=e.get("status"))
        elif tag == subset:
            out["valid"].append(e)
            if run is not None:
                run["validations"].append(e)
        elif tag == "train":
            out["train"][int(e["epoch"])] = e
        elif tag == "train_inner":
            out["inner"] = e
    return out


def _drop_after(out: Dict, updates: int) -> None:
    def kept(e: Dict) -> bool:
        return (e.get("num_updates") or 0) <= updates

    out["valid"] = [e for e in out["valid"] if kept(e)]
    out["train"] = {k: e for k, e in out["train"].items() if kept(e)}
    if out["inner"] is not None and not kept(out["inner"]):
        out["inner"] = None
