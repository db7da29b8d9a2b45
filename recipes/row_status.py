"""One status line per training row, from its log alone: epoch and the share of it done, learning
rate, halvings so far, last validation perplexity, updates/s and the time left; then the summed
updates/s of the rows that are training.

``recipes/rows.py`` prints these every 30 s while it runs the rows; ``python recipes/report.py
status WORK`` prints them from another shell, from ``WORK/.rows.json`` (the runner's record of each
step's state and, under a time budget, when each training stops) and the logs.
"""

import json
import os
import shlex
import time
from typing import List, Optional, Sequence, Tuple

from page_format import NONE, duration
from run_folders import flag_value, read_text

from fairseq_noising.analysis import logs

_STATES = {
    "running": "training",
    "waiting": "waiting",
    "done": "finished",
    "budget": "stopped by the time budget",
    "failed": "FAILED",
    "skipped": "not run",
    "cut": "stopped",  # cut off, or its runner gone
}


def _minutes(seconds: float) -> str:
    return duration(max(seconds, 0.0), seconds_below=90)


def command_of(run_dir: str) -> List[str]:
    """A run folder's training command, as the recipe queued it (``.command``)."""
    line = read_text(os.path.join(run_dir, ".command")) or read_text(os.path.join(run_dir, ".done"))
    return shlex.split(line) if line else []


def row_line(
    run_dir: str, state: str, now: float, stop_at: Optional[float] = None, note: str = ""
) -> Tuple[str, Optional[float]]:
    """The status line of one training and its updates/s (None unless it is training)."""
    name = os.path.basename(run_dir.rstrip("/"))
    path = os.path.join(run_dir, "train.log")
    run = logs.read_log(path) if os.path.isfile(path) else logs.RunLog()
    cmd = command_of(run_dir)
    max_epoch = int(flag_value(cmd, "--max-epoch", "0") or 0)
    halvings = flag_value(cmd, "--halvings", "8") if "paper_halving" in cmd else None
    done = run.epochs_done
    # inside an epoch (training, or stopped in it by a limit): its number and the share done
    inside = state == "running" and not (max_epoch and done >= max_epoch) or done % 1 > 0
    epoch = f"epoch {int(done) + 1} ({done % 1:.0%})" if inside else f"epoch {int(done)}"
    parts = [f"{name:<16}", epoch]
    parts.append(f"lr {run.current_lr:g}" if run.current_lr is not None else "lr " + NONE)
    if halvings is not None:
        parts.append(f"halvings {run.halving[0] if run.halving else 0}/{halvings}")
    last = run.valid_ppl[max(run.valid_ppl)] if run.valid_ppl else None
    parts.append(f"valid ppl {last:.2f}" if last is not None else "valid ppl " + NONE)
    ups = run.ups if state == "running" else None
    parts.append(f"{ups:.1f} upd/s" if ups is not None else "")
    if state == "running":
        left = []
        if stop_at is not None:
            left.append(stop_at - now)
        if ups and run.position and max_epoch:
            left.append((max_epoch - done) * run.position[2] / ups)
        if left:
            parts.append(f"left <= {_minutes(min(left))}")
    parts.append(_STATES.get(state, state) + (f": {note}" if note else ""))
    return "  ".join(p for p in parts if p), ups


def status_lines(entries: Sequence[tuple], now: float) -> List[str]:
    """Lines for (run folder, state, stop_at, note) entries, then the summed updates/s."""
    lines, total, training = [], 0.0, 0
    for run_dir, state, stop_at, note in entries:
        line, ups = row_line(run_dir, state, now, stop_at, note)
        lines.append(line)
        if state == "running":
            training += 1
            total += ups or 0.0
    if training:
        lines.append(f"all rows: {total:.1f} upd/s ({training} training)")
    return lines


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _folder_entries(work: str, known: Sequence[str]) -> List[tuple]:
    """(run folder, state from its markers, None, "") of the trainings under WORK not in known."""
    entries, known = [], {os.path.realpath(path) for path in known}
    for root, _, files in sorted(os.walk(work)):
        if "train.log" in files and os.path.realpath(root) not in known:
            state = next((s for s in ("done", "budget", "failed") if f".{s}" in files), "cut")
            entries.append((root, state, None, ""))
    return entries


def work_status(work: str, now: Optional[float] = None) -> List[str]:
    """The status of the rows of a recipe's working folder, from its files alone: the runner's
    record (``.rows.json``, the last set of steps it ran) and every run folder's markers and log."""
    now = time.time() if now is None else now
    text = read_text(os.path.join(work, ".rows.json"))
    record = json.loads(text) if text else None
    alive = record is not None and _alive(record["pid"])
    entries = []
    for step in record["steps"] if record else []:
        if step["kind"] != "train":
            continue
        state = step["state"]
        if state == "running" and not alive:
            state = "cut"  # the runner is gone, and its rows with it
        entries.append((step["target"], state, step.get("stop_at"), step.get("note", "")))
    entries += _folder_entries(work, [e[0] for e in entries])
    head = []
    if record:
        line = f"{record['prog']}: {record['jobs']} at a time"
        line += ", under CUDA MPS" if record["mps"] else ""
        if record.get("deadline"):
            line += f", time budget ends in {_minutes(record['deadline'] - now)}"
        head = [line + ("" if alive else " (not running now)")]
    return head + (status_lines(entries, now) or [f"no training runs under {work}"])
