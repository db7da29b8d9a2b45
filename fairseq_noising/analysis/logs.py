"""Per-epoch perplexities and the noising configuration read from fairseq training logs.

Understands the ``simple``, ``tqdm`` and ``json`` log formats of ``fairseq-train`` (and any mix,
for instance a resumed run), also as ``fairseq-hydra-train`` writes them (``hydra_train.log``:
``[time][train][INFO] - epoch 003 | loss ...``). The lines used are the end-of-epoch summaries:

- simple/tqdm: ``... | train | epoch 003 | loss 5.1 | ppl 34.3 | ...`` and
  ``... | valid | epoch 003 | valid on 'valid' subset | loss 5.3 | ppl 39.4 | ...``;
- json: ``... | train | {"epoch": 3, "train_loss": "5.1", "train_ppl": "34.3", ...}`` and
  ``... | valid | {"epoch": 3, "valid_loss": "5.3", "valid_ppl": "39.4", ...}``.

Per-update lines (``train_inner``) are ignored. When an epoch appears twice (a run resumed
from a checkpoint of the middle of an epoch), the last value wins. ``ppl`` is the one fairseq
prints (2 ** loss, loss in bits). The train summary's ``lr`` and ``wall`` (seconds since the
process began) are kept per epoch; a resumed run's log holds one process after another, each
starting with fairseq's configuration dump (``fairseq_cli.train | {'_name': ...``), and the run's
wall time is the sum of each process's last ``wall``. The noising scheme and gamma_0 are read
from the configuration dump at the start of a run (``'noise_scheme': kn, 'noise_gamma': 0.2``), the
GPU from fairseq's CUDA environment lines (``rank   0: ... ; name = NVIDIA H100 80GB HBM3``).

A run's progress comes from the last per-update line (``train_inner``: the position inside the
epoch, updates/s, learning rate), from ``paper_halving``'s decisions (``halving 2/8``, ``stop: all 8
halvings done``) and from the line with which fairseq-train ends (:attr:`RunLog.stop`).
"""

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

_SIMPLE_VALID = re.compile(r"epoch (\d+) \| valid on '([^']+)' subset \| (.*)$")
_SIMPLE_TRAIN = re.compile(r"(?:^|\| |\] - )epoch (\d+) \| (loss [^|]*\|.*)$")
_SCHEME = re.compile(r"'noise_scheme': '?([A-Za-z_]+)'?")
_GAMMA = re.compile(r"'noise_gamma': ([0-9.eE+-]+)")
_GPU = re.compile(r"rank +0: capabilities = .* ; name = (.*\S)")
_PROCESS_START = re.compile(r"fairseq_cli\.train(?: \||\]\[INFO\] -) \{'_name'")
_INNER = re.compile(r"epoch (\d+):\s+(\d+) / (\d+) (.*)$")
_HALVING = re.compile(
    r"paper_halving: epoch \d+: .*?; (?:halving (\d+)/(\d+)|stop: all (\d+) halvings done)"
)
# the lines with which fairseq-train stops early, and what each means (RunLog.stop)
_STOPS = (
    ("halvings", re.compile(r"paper_halving: epoch \d+: .*; stop: all \d+ halvings done")),
    ("time", re.compile(r"Stopping training due to cumulative_training_time: ([0-9.]+)")),
    ("max_update", re.compile(r"Stopping training due to num_updates")),
    ("patience", re.compile(r"early stop since valid performance hasn't improved")),
)


@dataclass
class RunLog:
    path: str = ""
    train_ppl: Dict[int, float] = field(default_factory=dict)
    valid_ppl: Dict[int, float] = field(default_factory=dict)
    noise_scheme: Optional[str] = None
    noise_gamma: Optional[float] = None
    lr: Dict[int, float] = field(default_factory=dict)  # per epoch, from the train summary
    wall: Dict[int, float] = field(default_factory=dict)  # seconds, from the train summary
    process_walls: List[float] = field(default_factory=list)  # the last wall of each process
    gpu: Optional[str] = None  # the CUDA device of rank 0; None on a CPU
    # progress: (epoch, update, updates in the epoch) of the last train_inner line, its updates/s,
    # the learning rate (last train_inner or train line), (halvings so far, --halvings) from
    # paper_halving's decisions, why the last process stopped early (halvings, time, max_update,
    # patience) and, for the time limit, the cumulative training hours it reported
    position: Optional[tuple] = None
    ups: Optional[float] = None
    current_lr: Optional[float] = None
    halving: Optional[tuple] = None
    stop: Optional[str] = None
    trained_hours: Optional[float] = None
    stopped_at: Optional[tuple] = None  # position (as ``position``) where a time or update limit
    # stopped the run inside an epoch (fairseq still logs that epoch's summary and validation)

    @property
    def halvings(self) -> int:
        """How many times the learning rate went down from one epoch to the next."""
        rates = [self.lr[e] for e in sorted(self.lr)]
        return sum(b < a for a, b in zip(rates, rates[1:]))

    epoch_closed: bool = False  # the epoch of ``position`` ended (its summary came after it)

    @property
    def epochs_done(self) -> float:
        """Epochs trained, the current one's share included: from the last train_inner line (or
        where a limit stopped the run), else the epochs validated."""
        done = float(max(self.valid_ppl, default=0))
        pos = self.stopped_at or self.position
        if not pos or not pos[2]:
            return done
        if self.epoch_closed and self.stopped_at is None:
            return max(done, float(pos[0]))
        return pos[0] - 1 + pos[1] / pos[2]

    @property
    def wall_seconds(self) -> Optional[float]:
        """The run's wall-clock seconds: each process's up to its last epoch summary, summed."""
        return sum(self.process_walls) if self.wall else None

    @property
    def best_valid_ppl(self) -> Optional[float]:
        return min(self.valid_ppl.values()) if self.valid_ppl else None

    @property
    def best_valid_epoch(self) -> Optional[int]:
        if not self.valid_ppl:
            return None
        return min(self.valid_ppl, key=lambda e: (self.valid_ppl[e], e))


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


def _train_summary(run: RunLog, epoch: int, stats: Dict[str, str], prefix: str = "") -> None:
    run.train_ppl[epoch] = _ppl(stats, prefix)
    if run.position and run.position[0] == epoch:
        run.epoch_closed = True
    updates = _number(stats, prefix + "num_updates")
    if run.stopped_at and run.stopped_at[0] == epoch and updates is not None:
        # the summary of an epoch a limit cut short: its update count places the stop exactly
        # (every epoch has the same number of updates)
        steps = run.stopped_at[2]
        inside = int(updates) - (epoch - 1) * steps
        if run.stopped_at[1] <= inside <= steps:
            run.stopped_at = (epoch, inside, steps)
    lr, wall = _number(stats, prefix + "lr"), _number(stats, prefix + "wall")
    if lr is not None:
        run.lr[epoch] = lr
        run.current_lr = lr
    if wall is not None:
        run.wall[epoch] = wall
        run.process_walls[-1:] = [wall]  # this process's latest


def _ppl(stats: Dict[str, str], prefix: str = "") -> Optional[float]:
    if prefix + "ppl" in stats:
        return float(stats[prefix + "ppl"])
    if prefix + "loss" in stats:  # a log without ppl: fairseq's loss is in bits
        return float(2.0 ** float(stats[prefix + "loss"]))
    return None


def parse_log(text: str, path: str = "", subset: str = "valid") -> RunLog:
    """The per-epoch train and ``subset`` perplexities and the noising settings of one log."""
    run = RunLog(path=path)
    for line in text.splitlines():
        if run.noise_scheme is None:
            m = _SCHEME.search(line)
            if m:
                run.noise_scheme = m.group(1)
                g = _GAMMA.search(line)
                if g:
                    run.noise_gamma = float(g.group(1))
        if _PROCESS_START.search(line):
            run.process_walls.append(0.0)
            run.stop = run.trained_hours = run.stopped_at = None  # an earlier process's ending
        if run.gpu is None:
            m = _GPU.search(line)
            if m:
                run.gpu = m.group(1)
        for reason, pattern in _STOPS:
            m = pattern.search(line)
            if m:
                run.stop = reason
                if reason == "time":
                    run.trained_hours = float(m.group(1))
                if reason in ("time", "max_update") and run.position:
                    run.stopped_at = run.position
        m = _HALVING.search(line)
        if m:
            if m.group(3):
                run.halving = (int(m.group(3)), int(m.group(3)))
            else:
                run.halving = (int(m.group(1)), int(m.group(2)))
        if "train_inner" in line:
            m = _INNER.search(line)
            if m:
                run.position = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
                run.epoch_closed = False
                stats = dict(kv.split("=", 1) for kv in m.group(4).split(", ") if "=" in kv)
                run.ups, lr = _number(stats, "ups"), _number(stats, "lr")
                run.current_lr = lr if lr is not None else run.current_lr
            continue
        brace = line.find('{"epoch"')
        if brace >= 0:
            try:
                stats = json.loads(line[brace:])
            except ValueError:
                continue
            epoch = int(stats["epoch"])
            value = _ppl(stats, subset + "_")
            if value is not None:
                run.valid_ppl[epoch] = value
            if "train_loss" in stats:  # end-of-epoch train summary (train_inner has "loss")
                _train_summary(run, epoch, stats, "train_")
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
