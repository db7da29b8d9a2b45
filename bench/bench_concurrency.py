"""Updates/s of N training runs side by side: how many rows of a table one device carries."""

import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from contextlib import ExitStack, suppress
from pathlib import Path

import numpy as np

from fairseq_noising.sweep.mps import mps_daemon

from . import _common

PROG = "bench_concurrency.py"
STARTUP_TIMEOUT = 900.0  # s for every run to start and finish its warm-up
LAST_LINE_TIMEOUT = 300.0  # s for every run to log a line after the window closed
# a run's data loader passes batches through a socket TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, and
# a socket's path has at most 107 characters (longer, the run hangs)
SOCKET_PATH_ROOM = 107 - len("/pymp-XXXXXXXX/listener-XXXXXXXX")
UPDATES = re.compile(r"num_updates\W+(\d+)")  # simple ("num_updates=10") and json log formats


def fail(message: str) -> None:
    raise SystemExit(f"{PROG}: error: {message}")


def checked(kind, ok, expected):  # an argparse type: kind(text) where ok holds of it
    def parse(text):
        with suppress(ValueError):
            if ok(value := kind(text)):
                return value
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")

    return parse


def parse_args(argv):
    parser = _common.parser(PROG, __doc__, device=True)
    counts = checked(
        lambda text: [int(part) for part in text.split(",")],
        lambda counts: min(counts) > 0 and len(set(counts)) == len(counts),
        "distinct positive run counts separated by commas, such as 1,4,7,9",
    )
    parser.add_argument("--runs", type=counts, default=[1, 2], help="run counts N (1,2)")
    seconds = checked(float, lambda seconds: seconds > 0, "a positive number")
    parser.add_argument("--seconds", type=seconds, default=60.0, help="window (60)")
    parser.add_argument("--size", default="medium", choices=("small", "medium", "large"))
    parser.add_argument("--mps", action="store_true", help="run under the NVIDIA MPS (cuda)")
    parser.add_argument("--data-bin", type=Path, help="binarized PTB to read instead of binarizing")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    names = ("dict.txt", "train.bin", "train.idx", "valid.bin", "valid.idx")
    if args.data_bin is None:
        args.data_bin = _common.binarized_ptb(args.ptb_dir, args.cache_dir)
    elif missing := [name for name in names if not (args.data_bin / name).is_file()]:
        fail(
            f"--data-bin {args.data_bin} lacks {', '.join(missing)} (expected the output of "
            "fairseq-preprocess --only-source on PTB)"
        )
    if args.json is not None and not args.json.parent.is_dir():
        fail(f"--json {args.json}: folder {args.json.parent} does not exist")
    return args


class Run:
    """One fairseq-hydra-train process (``_common.start``); a thread reads its output."""

    def __init__(self, cmd, folder: Path, env):
        folder.mkdir(parents=True)
        self.log, self.proc = open(folder / "train.log", "w"), _common.start(cmd, env=env)
        self.times, self.updates = [], []  # of each train_inner line: arrival, num_updates
        self.tail, self.reader = deque(maxlen=10), threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            now = time.monotonic()
            self.log.write(line)
            self.tail.append(line.rstrip())
            if found := "train_inner" in line and UPDATES.search(line):
                self.updates.append(int(found.group(1)))
                self.times.append(now)  # last: updates is never shorter than times

    def last(self):
        """(arrival time, num_updates) of the latest train_inner line, or (-inf, 0)."""
        n = len(self.times)
        return (self.times[n - 1], self.updates[n - 1]) if n else (-math.inf, 0)

    def updates_at(self, t):
        """num_updates at time t, interpolated between the log lines before and after it."""
        n = len(self.times)
        return float(np.interp(t, self.times[:n], self.updates[:n]))


def wait_until(runs, ready, deadline, waiting_for):
    """Polls until ready(run) holds for every run; fails when a run exits or at the deadline."""
    while True:
        for i, run in enumerate(runs, 1):
            code = run.proc.poll()
            if code is not None:
                run.reader.join(_common.GRACE)
                last = "its last lines (--keep keeps its whole log):\n" + "\n".join(run.tail)
                fail(f"run {i} of {len(runs)} exited (code {code}) before {waiting_for}; {last}")
        if all(ready(run) for run in runs):
            return time.monotonic()
        if time.monotonic() > deadline:
            late = [i for i, run in enumerate(runs, 1) if not ready(run)]
            fail(f"run(s) {late} of {len(runs)} did not reach {waiting_for} within the time limit")
        time.sleep(0.05)


def measure(n, cmd, folder: Path, env, seconds, warmup):
    """updates/s of each of n runs of cmd side by side, over one window after the warm-up."""
    runs = []
    try:
        for i in range(1, n + 1):
            runs.append(Run(cmd + [f"hydra.run.dir={folder / f'run{i}'}"], folder / f"run{i}", env))
        started, end = time.monotonic(), f"the end of the warm-up ({warmup} updates)"
        opened = wait_until(runs, lambda r: r.last()[1] >= warmup, started + STARTUP_TIMEOUT, end)
        print(f"N={n}: warm after {opened - started:.1f} s; measuring {seconds:g} s", flush=True)
        closes, after = opened + seconds, "a log line after the window"
        wait_until(runs, lambda r: r.last()[0] > closes, closes + LAST_LINE_TIMEOUT, after)
        return [(run.updates_at(closes) - run.updates_at(opened)) / seconds for run in runs]
    finally:
        _common.stop([run.proc for run in runs])
        for run in runs:
            run.reader.join(_common.GRACE)
            run.log.close()


def summarize(counts, per_run):
    """The figures of each N, printed as a table."""
    rows = [
        dict(runs=n, per_run=r, mean=statistics.mean(r), min=min(r), sum=math.fsum(r))
        for n, r in zip(counts, per_run)
    ]
    alone = next((row["sum"] for row in rows if row["runs"] == 1), None)
    print("   N  updates/s per run  slowest run      summed  speed-up over N=1")
    for row in rows:
        row["speedup"] = None if alone is None else row["sum"] / alone
        speedup = "n/a" if alone is None else f"{row['speedup']:.2f}x"
        mean, low, total = (f"{row[k]:.2f}" for k in ("mean", "min", "sum"))
        print(f"{row['runs']:>4}  {mean:>17}  {low:>11}  {total:>10}  {speedup:>17}", flush=True)
    return rows


def training_command(args, device, log_interval):
    """The none row of ptb_<size>, its evaluation (and resolvers) off; each run adds its folder."""
    cmd = [_common.cli("fairseq-hydra-train"), "--config-dir", str(_common.REPO / "recipes/config")]
    cmd += ["--config-name", f"ptb_{args.size}", f"task.data={args.data_bin.resolve()}"]
    cmd += ["task={noise_scheme:none,noise_gamma:0}", "~hydra.callbacks.row"]
    cmd += [f"common.user_dir={_common.PLUGIN_DIR}", "hydra.sweep.subdir=run"]
    cmd += ["optimization.max_epoch=100000", f"common.log_interval={log_interval}"]
    return cmd + (["common.cpu=true"] if device == "cpu" else [])


def main(argv=None):
    args = parse_args(argv)
    device = _common.device(args.device, PROG)
    log_interval = 1 if device == "cpu" else 10
    warmup, per_run = 5 * log_interval, []
    env = {**os.environ, **_common.ONE_THREAD, "PYTHONUNBUFFERED": "1"}
    if device == "cuda":  # one GPU for every run (and for the MPS daemon)
        env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        os.environ["CUDA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"]
    with ExitStack() as stack:
        work = Path(tempfile.mkdtemp(prefix="bench-concurrency-"))
        keep = (print, f"{PROG}: kept {work}") if args.keep else (shutil.rmtree, work, True)
        stack.callback(*keep)  # the folder kept, or removed (ignore_errors=True)
        env["TMPDIR"] = str(work / "tmp")  # what killed runs leave there goes with the folder
        if len(env["TMPDIR"]) > SOCKET_PATH_ROOM:
            fail(
                f"the runs' temporary folder {env['TMPDIR']} is too long a path for their sockets "
                f"(at most {SOCKET_PATH_ROOM} characters): set TMPDIR to a shorter folder"
            )
        (work / "tmp").mkdir()
        if args.mps:
            daemon = mps_daemon(work / "mps", prog=PROG, flag="--mps", device=device)
            env.update(stack.enter_context(daemon))
        cmd = training_command(args, device, log_interval)
        shown = shlex.join(cmd + [f"hydra.run.dir={work / 'n<N>' / 'run<i>'}"])
        print(_common.machine_line(), flush=True)
        print(
            f"ptb_{args.size} on {device}{' under MPS' if args.mps else ''}, one thread a run; "
            f"window {args.seconds:g} s after {warmup} warm-up updates; each run:\n  {shown}",
            flush=True,
        )
        for n in args.runs:
            print(f"N={n}: starting {n} run(s)", flush=True)
            per_run.append(measure(n, cmd, work / f"n{n}", env, args.seconds, warmup))
            print(f"N={n}: updates/s " + ", ".join(f"{r:.2f}" for r in per_run[-1]), flush=True)
    rows = summarize(args.runs, per_run)
    if args.json is not None:
        report = dict(machine=_common.machine_line(), size=args.size, device=device, mps=args.mps)
        report.update(threads=1, seconds=args.seconds, warmup_updates=warmup)
        report.update(log_interval=log_interval, command=shown, rows=rows)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM as Ctrl-C: runs stopped
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(f"{PROG}: interrupted; every run it started was stopped")
