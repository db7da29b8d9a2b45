"""Per-epoch perplexities from fairseq training logs: the one module that reads log lines.

It serves logs that have nothing else (``fairseq-noise-analyze curves``, ``fairseq-noise-page
--import-logs``); the formats and lines it reads: docs/analysis.md, ``curves``.
"""

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

_SIMPLE_VALID = re.compile(r"epoch (\d+) \| valid on '([^']+)' subset \| (.*)$")
_SIMPLE_TRAIN = re.compile(r"(?:^|\| |\] - )epoch (\d+) \| (loss [^|]*\|.*)$")
_PROCESS_START = re.compile(r"fairseq_cli\.train(?: \||\]\[INFO\] -) \{'_name'")
_INNER = re.compile(r"epoch (\d+):\s+(\d+) / (\d+) (.*)$")


def lowered_at(lr: Dict[int, float]) -> List[int]:
    """The epochs trained at a lower learning rate than the epoch before (per-epoch rates)."""
    epochs = sorted(e for e in lr if lr[e] is not None)
    return [b for a, b in zip(epochs, epochs[1:]) if lr[b] < lr[a]]


@dataclass
class RunLog:
    path: str = ""
    train_ppl: Dict[int, float] = field(default_factory=dict)
    valid_ppl: Dict[int, float] = field(default_factory=dict)
    lr: Dict[int, float] = field(default_factory=dict)  # per epoch, from the train summary
    wall: Dict[int, float] = field(default_factory=dict)  # seconds, from the train summary
    process_walls: List[float] = field(default_factory=list)  # the last wall of each process
    # (epoch, share of it done) of the last train_inner line, the learning rate then (or of the
    # last train summary)
    position: Optional[float] = None
    current_lr: Optional[float] = None

    @property
    def halvings(self) -> int:
        """How many times the learning rate went down from one epoch to the next."""
        return len(lowered_at(self.lr))

    @property
    def epochs_done(self) -> float:
        """Epochs trained, the current one's share included."""
        done = float(max(self.valid_ppl, default=0))
        return max(done, self.position or 0.0)

    @property
    def wall_seconds(self) -> Optional[float]:
        """The run's wall-clock seconds: each process's up to its last epoch summary, summed."""
        return sum(self.process_walls) if self.wall else None

    @property
    def best_valid_ppl(self) -> Optional[float]:
        return min(self.valid_ppl.values()) if self.valid_ppl else None


def _pipes(text: str) -> Dict[str, str]:
    out = {}
    for part in text.split("|"):
        part = part.strip()
        if " " in part:
            key, value = part.split(" ", 1)
            out[key] = value.strip()
    return out


def _number(stats: Dict[str, str], key: str) -> Optional[float]:
    try:
        return float(stats[key])
    except (KeyError, ValueError):
        return None


def _ppl(stats: Dict[str, str], prefix: str = "") -> Optional[float]:
    if prefix + "ppl" in stats:
        return float(stats[prefix + "ppl"])
    if prefix + "loss" in stats:  # a log without ppl: fairseq's loss is in bits
        return float(2.0 ** float(stats[prefix + "loss"]))
    return None


def _train_summary(run: RunLog, epoch: int, stats: Dict[str, str], prefix: str = "") -> None:
    run.train_ppl[epoch] = _ppl(stats, prefix)
    run.position = max(run.position or 0.0, float(epoch))
    lr, wall = _number(stats, prefix + "lr"), _number(stats, prefix + "wall")
    if lr is not None:
        run.lr[epoch] = run.current_lr = lr
    if wall is not None:
        run.wall[epoch] = wall
        if not run.process_walls:
            run.process_walls.append(0.0)
        run.process_walls[-1] = wall  # this process's latest


def _inner(run: RunLog, epoch: int, share: float, stats: Dict) -> None:
    run.position = epoch - 1 + share
    lr = _number(stats, "lr")
    run.current_lr = lr if lr is not None else run.current_lr


def parse_log(text: str, path: str = "", subset: str = "valid") -> RunLog:
    """The per-epoch train and ``subset`` perplexities of one log."""
    run = RunLog(path=path)
    for line in text.splitlines():
        if _PROCESS_START.search(line):
            run.process_walls.append(0.0)
        brace = line.find('{"epoch"')
        if brace >= 0:
            try:
                stats = json.loads(line[brace:])
            except ValueError:
                continue
            epoch = int(stats["epoch"])
            if "update" in stats:  # train_inner: the epoch's share in "update"
                _inner(run, epoch, float(stats["update"]) - (epoch - 1), stats)
                continue
            value = _ppl(stats, subset + "_")
            if value is not None:
                run.valid_ppl[epoch] = value
            if "train_loss" in stats:  # end-of-epoch train summary
                _train_summary(run, epoch, stats, "train_")
            continue
        if "train_inner" in line:
            m = _INNER.search(line)
            if m:
                stats = dict(kv.split("=", 1) for kv in m.group(4).split(", ") if "=" in kv)
                _inner(run, int(m.group(1)), int(m.group(2)) / int(m.group(3)), stats)
            continue
        m = _SIMPLE_VALID.search(line)
        if m:
            if m.group(2) == subset:
                value = _ppl(_pipes(m.group(3)))
                if value is not None:
                    run.valid_ppl[int(m.group(1))] = value
            continue
        m = _SIMPLE_TRAIN.search(line)
        if m:
            stats = _pipes(m.group(2))
            if _ppl(stats) is not None:
                _train_summary(run, int(m.group(1)), stats)
    return run


def read_log(path: str, subset: str = "valid") -> RunLog:
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_log(f.read(), path=path, subset=subset)


def ppl_from_best(best: float, metric: str) -> float:
    """Perplexity from a checkpoint's best ``--best-checkpoint-metric`` value."""
    if metric in ("loss", "nll_loss"):
        return float(2.0**best)
    if metric == "ppl":
        return float(best)
    raise ValueError(f"cannot turn the best {metric} into a perplexity")


_STAMP = re.compile(r"^\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_LOADED = re.compile(r"Loaded checkpoint \S+ \(epoch \d+ @ (\d+) updates\)")


def progress_events(text: str, subset: str = "valid") -> List[Dict]:
    """A sweep row's progress file (:mod:`fairseq_noising.sweep.events`) from its json log, for
    a row trained before rows recorded one: a ``start`` at each process's start (``from`` the
    updates of the checkpoint it loaded, or None), then its json records with fairseq's own
    statistic names, each at its line's time (the machine's local time, as logging printed it)."""
    import time

    out: List[Dict] = [{"tag": "imported", "time": 0.0}]
    when = 0.0
    for line in text.splitlines():
        m = _STAMP.match(line)
        if m:
            when = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))  # local
        if _PROCESS_START.search(line):
            out.append({"tag": "start", "from": None, "time": when})
        elif (m := _LOADED.search(line)) and out[-1]["tag"] == "start":
            out[-1]["from"] = {"updates": int(m.group(1)), "where": f"update {m.group(1)}"}
        brace = line.find('{"epoch"')
        if brace < 0:
            continue
        try:
            stats = json.loads(line[brace:])
        except ValueError:
            continue
        if "update" in stats:
            tag, prefix = "train_inner", ""
        elif "train_loss" in stats:
            tag, prefix = "train", "train_"
        elif f"{subset}_loss" in stats:
            tag, prefix = subset, f"{subset}_"
        else:
            continue
        event = {"tag": tag, "epoch": int(stats.pop("epoch")), "time": when}
        for key, value in stats.items():
            name = "position" if key == "update" else key.removeprefix(prefix)
            event[name] = _number({name: value}, name)
        out.append(event)
    return out
