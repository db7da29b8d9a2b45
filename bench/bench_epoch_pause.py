#!/usr/bin/env python
"""The pause ``fairseq-train`` makes at each epoch boundary, for a few data loader settings.

Each setting (a string of extra ``fairseq-train`` flags, ``--settings``) trains a tiny stateful
LSTM LM (``noising_lstm_lm_small``, ``--hidden-size 16``, the README's PTB command otherwise) for
``--epochs`` epochs on the first ``--train-lines`` lines of PTB train (valid and test: the first
``--valid-lines`` lines), binarized through ``_common.binarized_ptb`` into ``--cache-dir``. The run
logs every update (``--log-format json --log-interval 1``, ``OMP_NUM_THREADS=1``); each output line
is stamped with ``time.monotonic()`` as it arrives. Figures per setting:

* **update**: median interval between consecutive ``train_inner`` lines inside an epoch;
* **boundary**: last update of epoch k to first update of epoch k+1, minus one update: validation,
  checkpoint saving and the loader's restart (median and max over the boundaries);
* **valid**: the validation pass in it (``begin validation`` to the ``valid`` line, median);
* **after save**: "Saved checkpoint ... (epoch k" to the first update of epoch k+1, minus one
  update (median and max);
* **stalls**: update intervals inside epochs longer than 1 s and 20 updates (count, seconds);
* **start**: process start to the first update; **end**: last update to the process's exit
  (the last validation and checkpoint, then shutdown).

    python bench/bench_epoch_pause.py
    python bench/bench_epoch_pause.py --settings "--num-workers 1" "--num-workers 0"
"""

import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402

SETTINGS = (
    "--num-workers 1 --data-buffer-size 10",  # fairseq's defaults
    "--num-workers 0",
    "--num-workers 0 --data-buffer-size 0",
)
TRAIN = (
    "--task noised_language_modeling --stateful-bptt --arch noising_lstm_lm_small --hidden-size 16 "
    "--sentence-avg --batch-size 20 --required-batch-size-multiple 1 --tokens-per-sample 35 "
    "--optimizer sgd --lr 1.0 --clip-norm 5 --lr-scheduler paper_halving --halvings 8 "
    "--stop-min-lr 0 --no-epoch-checkpoints --cpu --log-format json --log-interval 1"
)
SAVED = re.compile(r"Saved checkpoint .*\(epoch (\d+) @")


def subset_ptb(ptb_dir: Path, out: Path, train_lines: int, valid_lines: int) -> Path:
    """The first lines of PTB's three files in ``out`` (binarized by ``_common``)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in _common.PTB_FILES:
        keep = train_lines if name == "ptb.train.txt" else valid_lines
        with open(ptb_dir / name) as src:
            lines = [line for _, line in zip(range(keep), src)]
        (out / name).write_text("".join(lines))
    return out


def train(data_bin: Path, setting: str, epochs: int, save_dir: Path):
    """Runs fairseq-train; returns its output lines as (arrival time, line), its start and end."""
    cmd = [_common.cli("fairseq-train"), str(data_bin), "--user-dir", str(_common.PLUGIN_DIR)]
    cmd += shlex.split(TRAIN) + shlex.split(setting)
    cmd += ["--max-epoch", str(epochs), "--save-dir", str(save_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=_common.REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines = []
    try:
        for line in proc.stdout:
            lines.append((time.monotonic(), line.rstrip("\n")))
        code = proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if code != 0:
        tail = "\n".join(line for _, line in lines[-15:])
        sys.exit(f"error: fairseq-train failed (exit {code}): {shlex.join(cmd)}\n{tail}")
    return lines, start, time.monotonic()


def measure(lines, start, end):
    """Figures of one run (see the module's docstring), in seconds."""
    updates = {}  # epoch -> arrival times of its train_inner lines
    valid_start, valid_took, saved = {}, {}, {}
    epoch = 0
    for t, line in lines:
        if "| train_inner | " in line:
            epoch = json.loads(line.split("| train_inner | ", 1)[1])["epoch"]
            updates.setdefault(epoch, []).append(t)
        elif "begin validation" in line:
            valid_start[epoch] = t
        elif "| valid | " in line and epoch in valid_start:
            valid_took[epoch] = t - valid_start[epoch]
        elif SAVED.search(line):
            saved[int(SAVED.search(line).group(1))] = t
    steps = [b - a for times in updates.values() for a, b in zip(times, times[1:])]
    update = statistics.median(steps)
    stalls = [s for s in steps if s > max(1.0, 20 * update)]
    boundary, after_save = [], []
    for k in sorted(updates):
        if k + 1 in updates:
            first = updates[k + 1][0] - update
            boundary.append(first - updates[k][-1])
            if k in saved:
                after_save.append(first - saved[k])
    if not boundary:
        sys.exit("error: no epoch boundary in the log; pass --epochs 2 or more")
    return {
        "update": update,
        "boundary": boundary,
        "valid": statistics.median(valid_took[k] for k in sorted(updates) if k in valid_took),
        "after_save": after_save or [float("nan")],
        "stalls": stalls,
        "start": min(times[0] for times in updates.values()) - start,
        "end": end - max(times[-1] for times in updates.values()),
    }


def sec(x):
    return f"{x:.2f}".replace("-0.00", "0.00")  # an estimate a hair below zero is zero


def table(rows):
    out = [
        "| setting | load | update (ms) | boundary median / max (s) | valid (s) "
        "| after save median / max (s) | stalls > 1 s | start (s) | end (s) | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for setting, load, f, wall in rows:
        out.append(
            f"| `{setting}` | {load:.2f} | {1000 * f['update']:.1f} "
            f"| {sec(statistics.median(f['boundary']))} / {sec(max(f['boundary']))} "
            f"| {sec(f['valid'])} "
            f"| {sec(statistics.median(f['after_save']))} / {sec(max(f['after_save']))} "
            f"| {len(f['stalls'])} ({sum(f['stalls']):.1f} s) | {f['start']:.1f} | {f['end']:.1f} "
            f"| {wall:.1f} |"
        )
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _common.add_ptb_argument(parser)
    parser.add_argument(
        "--settings",
        nargs="+",
        default=list(SETTINGS),
        help="fairseq-train flags of each setting, one quoted string each "
        f"(default: {' | '.join(SETTINGS)})",
    )
    parser.add_argument("--epochs", type=int, default=6, help="epochs a run (%(default)s)")
    parser.add_argument("--train-lines", type=int, default=2000, help="PTB train lines (2000)")
    parser.add_argument("--valid-lines", type=int, default=300, help="valid/test lines (300)")
    parser.add_argument("--log-dir", type=Path, help="write each run's stamped output here")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be 2 or more (a boundary needs two epochs)")
    ptb_dir = _common.check_ptb(args.ptb_dir)
    with tempfile.TemporaryDirectory(prefix="bench-epoch-pause-") as tmp:
        text = subset_ptb(ptb_dir, Path(tmp) / "ptb", args.train_lines, args.valid_lines)
        data_bin = _common.binarized_ptb(text, args.cache_dir)
        print(_common.machine_line(), flush=True)
        print(f"{TRAIN} --max-epoch {args.epochs} on {data_bin}", flush=True)
        rows = []
        for i, setting in enumerate(args.settings):
            load = os.getloadavg()[0]
            print(f"[{setting}] training (loadavg {load:.2f}) ...", flush=True)
            lines, start, end = train(data_bin, setting, args.epochs, Path(tmp) / f"save{i}")
            figures = measure(lines, start, end)
            if args.log_dir is not None:
                args.log_dir.mkdir(parents=True, exist_ok=True)
                stamped = "".join(f"{t - start:9.3f} {line}\n" for t, line in lines)
                (args.log_dir / f"setting{i}.log").write_text(f"# {setting}\n{stamped}")
            rows.append((setting, load, figures, end - start))
            print(
                f"[{setting}] boundaries (s): "
                + ", ".join(f"{b:.2f}" for b in figures["boundary"])
                + f"; stalls (s): {', '.join(f'{s:.2f}' for s in figures['stalls']) or 'none'}",
                flush=True,
            )
    print(_common.machine_line(), flush=True)
    print(table(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
