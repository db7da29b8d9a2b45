#!/usr/bin/env python3
"""Runs a recipe's queued trainings and evaluations side by side.

    python recipes/rows.py --queue FILE [--prog NAME] [--dry-run] [--jobs N] [--device cpu|cuda]
        [--threads T] [--every SECONDS] [--time-budget 25m --started EPOCH [--reserve 5m]]
        [--mps] [--page WRITE-ARGS ...]

``recipes/steps.py`` queues each ``train`` and ``evaluate`` step of a recipe in FILE; this runs
them, up to ``--jobs`` at once (default: every step on cuda, one per core on a CPU), each its own
process with its output in its own file (``train.log``, the evaluation's output) and ``--threads``
threads (default: the cores shared out). A step starts once the steps it reads from have finished
(an evaluation waits for the training whose checkpoint it names; :meth:`Step.needs`). A step
that fails does not stop the others; the steps that need it are skipped, and the run folder keeps
``.failed`` (the exit code and the log's last line) for the page.

Every ``--every`` seconds (and when a step ends) one status line per training and the summed
updates/s are printed (:mod:`row_status`); ``WORK/.rows.json`` keeps what the status command
(``python recipes/report.py status WORK``) needs to print the same from another shell.

``--time-budget`` (``s``, ``m`` or ``h``, counted from ``--started``, the recipe's start): each
training gets fairseq's ``--stop-time-hours`` so that it stops ``--reserve`` (default a fifth of
the budget, at least 2 min) before the budget ends, leaving that time to the evaluations and the
page; a resumed run's allowance is added to the training time its checkpoint already holds. A run
the budget stopped keeps ``.budget`` instead of ``.done`` (a rerun resumes it) and is evaluated
from its ``checkpoint_best.pt``. Optional steps (the analyses) are skipped once the budget is
spent and stopped when it ends. ``--mps`` runs everything under a CUDA MPS daemon of its own
(:mod:`mps`). ``--page`` gives the arguments of ``recipes/report.py write``: the page is rewritten
(``--partial``) whenever a step ends or a training validates an epoch, and once more when the
steps end or are cut off (Ctrl-C, SIGTERM).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from mps import mps_daemon  # noqa: E402
from recipe_settings import duration_seconds  # noqa: E402
from row_status import status_lines  # noqa: E402
from steps import Step, fail, queued, shown, write_marker  # noqa: E402

STARTUP = 30.0  # seconds from a training's launch to fairseq's clock, plus its last validation
MIN_ALLOWANCE = 20.0  # a training that would get less is not started
PAGE_MARGIN = 20.0  # seconds kept at the end of a budget for the last page
_TIME_STOP = "Stopping training due to cumulative_training_time"
_spawn = subprocess.Popen  # how a step's process starts (tests replace it)


def parse_duration(text: str, name: str, prog: str) -> float:
    seconds = duration_seconds(text)
    if seconds is None:
        fail(prog, f"{name} must be a duration such as 90s, 25m or 2h, got {text!r}")
    return seconds


class Interrupted(Exception):
    pass


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


class Job:
    def __init__(self, step: Step, needs: List[int]):
        self.step = step
        self.needs = needs
        self.state = "waiting"  # running, done, budget, failed, skipped, cut
        self.proc: Optional[subprocess.Popen] = None
        self.started: Optional[float] = None
        self.stop_at: Optional[float] = None  # a training: when the time budget stops it
        self.log_start = 0  # where this process's output begins in train.log
        self.note = ""

    @property
    def finished(self) -> bool:
        return self.state not in ("waiting", "running")

    @property
    def usable(self) -> bool:
        """Whether the steps that need this one can run."""
        return self.state in ("done", "budget")


class Runner:
    def __init__(self, args, steps: List[Step]):
        self.args = args
        self.prog = args.prog
        self.jobs = [
            Job(s, [i for i in range(k) if s.needs(steps[i])]) for k, s in enumerate(steps)
        ]
        self.width = args.jobs or (len(steps) if args.device == "cuda" else os.cpu_count() or 1)
        self.threads = args.threads or max(1, (os.cpu_count() or 1) // self.width)
        self.deadline = self.train_deadline = None
        if args.time_budget:
            budget = parse_duration(args.time_budget, "TIME_BUDGET", self.prog)
            reserve = (
                parse_duration(args.reserve, "EVAL_RESERVE", self.prog)
                if args.reserve
                else max(120.0, budget / 5)
            )
            self.deadline = (args.started or time.time()) + budget
            self.train_deadline = self.deadline - reserve
        self.env: Dict[str, str] = {}
        self.state_file = os.path.join(os.path.dirname(os.path.abspath(args.queue)), ".rows.json")
        self.page_proc: Optional[subprocess.Popen] = None
        self.page_wanted = False
        self.validated: Dict[int, int] = {}  # train job -> how far its log has been read
        self.warned_late = False

    # -------------------------------------------------------------- launching and ending steps

    def launch(self, k: int, now: float) -> None:
        job = self.jobs[k]
        step = job.step
        cmd = list(step.cmd)
        os.makedirs(step.folder, exist_ok=True)
        if step.kind == "train":
            for name in (".done", ".budget", ".failed"):
                if os.path.exists(os.path.join(step.target, name)):
                    os.remove(os.path.join(step.target, name))
            write_marker(os.path.join(step.target, ".command"), step.line)
            last = os.path.join(step.target, "checkpoint_last.pt")
            if os.path.isfile(last):
                print(
                    f"{self.prog}: resuming {shown(step.target)} from checkpoint_last.pt",
                    flush=True,
                )
            if self.train_deadline is not None:
                allowance = self.train_deadline - now - STARTUP
                hours = (_trained_seconds(last) + allowance) / 3600.0
                cmd += ["--stop-time-hours", f"{hours:.6f}"]
                job.stop_at = self.train_deadline
            job.log_start = _size(step.output)
        out = open(step.output, "ab" if step.kind == "train" else "wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(self.threads)
        with out:
            job.proc = _spawn(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        job.state, job.started = "running", now
        print(f"{self.prog}: started {step.name}", flush=True)

    def end(self, k: int, code: int) -> None:
        job = self.jobs[k]
        step = job.step
        if step.kind == "train":
            with open(step.output, "rb") as f:
                f.seek(job.log_start)
                text = f.read().decode("utf-8", errors="replace")
            best = os.path.isfile(os.path.join(step.target, "checkpoint_best.pt"))
            if code == 0 and best:
                job.state = "budget" if _TIME_STOP in text else "done"
                write_marker(os.path.join(step.target, f".{job.state}"), step.line)
            else:
                last = (text.strip().splitlines() or ["(no output)"])[-1].strip()
                why = f"exit {code}" if code else "no checkpoint_best.pt"
                self._failed(job, f"{why}: {last}", os.path.join(step.target, ".failed"))
        elif code == 0:
            os.replace(step.output, step.target)
            write_marker(step.marker, step.line)
            job.state = "done"
        else:
            self._failed(job, f"exit {code}, its output: {shown(step.output)}")
        print(f"{self.prog}: {step.name}: {_said(job)}", flush=True)
        self.page_wanted = True

    def _failed(self, job: Job, note: str, marker: Optional[str] = None) -> None:
        job.state, job.note = "failed", note
        if marker:
            write_marker(marker, note + "\n")

    def _set(self, job: Job, state: str, note: str) -> None:
        job.state, job.note = state, note
        print(f"{self.prog}: {job.step.name}: {_said(job)}", flush=True)
        self.page_wanted = True

    # -------------------------------------------------------------- the loop

    def ready(self, k: int) -> Optional[bool]:
        """True: can start; False: must wait; None: cannot run (what it needs failed)."""
        needs = [self.jobs[i] for i in self.jobs[k].needs]
        if any(j.finished and not j.usable for j in needs):
            return None
        return all(j.usable for j in needs)

    def start_what_can(self, now: float) -> None:
        for k, job in enumerate(self.jobs):
            if job.state != "waiting":
                continue
            ready = self.ready(k)
            if ready is None:
                self._set(job, "skipped", "what it needs did not finish")
                continue
            if not ready or sum(j.state == "running" for j in self.jobs) >= self.width:
                continue
            step = job.step
            budgeted = step.kind == "train" and self.train_deadline is not None
            if budgeted and self.train_deadline - now - STARTUP < MIN_ALLOWANCE:
                if os.path.isfile(os.path.join(step.target, "checkpoint_best.pt")):
                    write_marker(os.path.join(step.target, ".budget"), step.line)
                    self._set(job, "budget", "not started: the time budget is spent")
                else:
                    self._set(job, "skipped", "not started: the time budget is spent")
                continue
            if step.optional and self.deadline is not None and now >= self.deadline - PAGE_MARGIN:
                self._set(job, "skipped", "the time budget is spent")
                continue
            if self.deadline is not None and now >= self.deadline and not self.warned_late:
                print(
                    f"{self.prog}: the time budget is spent; the evaluations still run", flush=True
                )
                self.warned_late = True
            self.launch(k, now)

    def reap(self, now: float) -> None:
        for k, job in enumerate(self.jobs):
            if job.state != "running":
                continue
            code = job.proc.poll()
            if code is not None:
                self.end(k, code)
            elif (
                job.step.optional
                and self.deadline is not None
                and now >= self.deadline - PAGE_MARGIN
            ):
                job.proc.terminate()
                job.proc.wait()
                self._set(job, "cut", "at the end of the time budget")

    def new_validations(self) -> bool:
        """Whether a training has validated an epoch since the last look (its progress lines
        alone do not change the page)."""
        changed = False
        for k, job in enumerate(self.jobs):
            if job.step.kind == "train" and job.state == "running":
                offset = self.validated.get(k, job.log_start)
                self.validated[k], validated = validations_since(job.step.output, offset)
                changed = changed or validated
        return changed

    def run(self) -> int:
        signal.signal(signal.SIGTERM, _raise_interrupted)
        mps = (
            mps_daemon(
                os.path.join(os.path.dirname(self.state_file), "mps"),
                self.prog,
                "MPS=1",
                self.args.device,
            )
            if self.args.mps
            else nullcontext({})
        )
        interrupted = None
        try:
            with mps as env:
                self.env = env
                self.announce()
                try:
                    self.loop()
                except (KeyboardInterrupt, Interrupted) as e:
                    interrupted = e
                    sig = signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM
                    self.stop_all(sig)
            self.write_page(wait=True)
        finally:
            self.save_state()
            if os.path.exists(self.args.queue):
                os.remove(self.args.queue)
        if interrupted is not None:
            print(f"{self.prog}: stopped; rerun the recipe to resume", file=sys.stderr, flush=True)
            return 130
        return 0

    def announce(self) -> None:
        kinds = [job.step.kind for job in self.jobs]
        text = (
            f"{self.prog}: {kinds.count('train')} trainings and {kinds.count('evaluate')} "
            f"evaluations, {self.width} at a time, {self.threads} threads each"
        )
        if self.deadline is not None:
            clock = time.strftime("%H:%M:%S", time.localtime(self.train_deadline))
            end = time.strftime("%H:%M:%S", time.localtime(self.deadline))
            text += f"; time budget: training stops by {clock}, the recipe ends by {end}"
        print(text, flush=True)

    def loop(self) -> None:
        last_status = 0.0
        while True:
            now = time.time()
            before = [job.state for job in self.jobs]
            self.reap(now)
            self.start_what_can(now)
            if all(job.finished for job in self.jobs):
                break
            if self.page_wanted or self.new_validations():
                self.write_page()
            if now - last_status >= self.args.every:
                self.print_status(now)
                last_status = now
            self.save_state()
            if before == [job.state for job in self.jobs]:
                time.sleep(0.5)
        self.print_status(time.time())

    def stop_all(self, sig) -> None:
        running = [job for job in self.jobs if job.state == "running"]
        for job in running:
            if job.proc.poll() is None:
                job.proc.send_signal(sig)
        for job in running:
            try:
                job.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                job.proc.kill()
                job.proc.wait()
            job.state, job.note = "cut", "by Ctrl-C or SIGTERM"
        if self.page_proc is not None:
            self.page_proc.wait()

    # -------------------------------------------------------------- status and page

    def print_status(self, now: float) -> None:
        entries = [
            (job.step.target, job.state, job.stop_at, job.note)
            for job in self.jobs
            if job.step.kind == "train" and job.state != "waiting"
        ]
        evaluating = [
            job.step.name
            for job in self.jobs
            if job.step.kind != "train" and job.state == "running"
        ]
        lines = status_lines(entries, now)
        if evaluating:
            lines.append("evaluating: " + ", ".join(evaluating))
        if lines:
            print(f"[{time.strftime('%H:%M:%S')}]", flush=True)
            print("\n".join("  " + line for line in lines), flush=True)

    def write_page(self, wait: bool = False) -> None:
        if not self.args.page:
            return
        if self.page_proc is not None and self.page_proc.poll() is None:
            if not wait:
                return  # the one being written will be followed by another
            self.page_proc.wait()
        cmd = [
            sys.executable,
            os.path.join(HERE, "report.py"),
            "write",
            "--partial",
            *self.args.page,
        ]
        self.page_proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        self.page_wanted = False
        if wait:
            self.page_proc.wait()

    def save_state(self) -> None:
        state = {
            "prog": self.prog,
            "pid": os.getpid(),
            "jobs": self.width,
            "mps": bool(self.args.mps),
            "deadline": self.deadline,
            "train_deadline": self.train_deadline,
            "steps": [
                {
                    "kind": job.step.kind,
                    "target": job.step.target,
                    "state": job.state,
                    "stop_at": job.stop_at,
                    "note": job.note,
                }
                for job in self.jobs
            ],
        }
        write_marker(self.state_file, json.dumps(state, indent=1))


def _said(job: Job) -> str:
    return {
        "done": "finished",
        "budget": "stopped by the time budget",
        "failed": "FAILED",
        "skipped": "skipped",
        "cut": "stopped",
    }[job.state] + (f" ({job.note})" if job.note else "")


_VALIDATION = b"valid on '"  # fairseq's line of a validation: "... | valid on 'valid' subset | ..."


def validations_since(path: str, offset: int) -> Tuple[int, bool]:
    """(how far the log is read now, whether its whole lines after offset hold a validation)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            gained = f.read()
    except OSError:
        return offset, False
    end = gained.rfind(b"\n") + 1  # whole lines only: one still being written is read next time
    return offset + end, _VALIDATION in gained[:end]


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _trained_seconds(checkpoint: str) -> float:
    """The training time a checkpoint holds (fairseq adds it to the clock of --stop-time-hours)."""
    if not os.path.isfile(checkpoint):
        return 0.0
    import torch

    import fairseq_noising.checkpoint_safety as safety

    safety.allow_fairseq_checkpoints()
    state = torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=True)
    return float(state.get("extra_state", {}).get("previous_training_time", 0.0))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="recipes/rows.py", description=__doc__.split("\n")[0])
    parser.add_argument("--queue", required=True, metavar="FILE")
    parser.add_argument("--prog", default="rows.py", help="the recipe, for messages")
    parser.add_argument("--dry-run", action="store_true", help="run nothing")
    parser.add_argument("--jobs", type=int, default=None, help="steps at once")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=None, help="threads per step")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between status lines")
    parser.add_argument("--time-budget", default="", metavar="DURATION")
    parser.add_argument("--started", type=float, default=None, metavar="EPOCH")
    parser.add_argument("--reserve", default="", metavar="DURATION")
    parser.add_argument("--mps", action="store_true")
    parser.add_argument("--page", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args(argv)
    if args.dry_run:
        return 0
    if args.jobs is not None and args.jobs < 1:
        fail(args.prog, f"JOBS must be a whole number >= 1, got {args.jobs}")
    steps = queued(args.queue)
    if not steps:
        return 0
    return Runner(args, steps).run()


if __name__ == "__main__":
    sys.exit(main())
