#!/usr/bin/env python3
"""The steps of the reproduction recipes: print each command, skip it when it is finished, run it.

    python recipes/steps.py [--prog NAME] [--dry-run] fetch URL DEST HINT
    python recipes/steps.py [--prog NAME] [--dry-run] prepare DIR CMD...
    python recipes/steps.py [--prog NAME] [--dry-run] train [--quiet] DIR CMD...
    python recipes/steps.py [--prog NAME] [--dry-run] evaluate [--quiet] OUT CMD...
    python recipes/steps.py [--prog NAME] [--dry-run] device auto|cpu|cuda

The recipes (``recipes/_common.sh`` names one shell function after each kind) call it once per
command. A step prints ``+ CMD`` and runs CMD, or prints ``= done already: CMD`` when it finished
before; with ``--dry-run`` it prints and runs nothing. Printed commands show paths relative to the
repository (``shown``), as the results pages do.

A step has finished when its marker holds exactly its command (``shlex.join`` of the arguments):

- ``prepare DIR``: marker ``DIR/.done``. An unfinished step starts again from an empty DIR.
- ``train DIR``: marker ``DIR/.done``. An unfinished step starts again in the same save dir, so
  fairseq resumes from ``DIR/checkpoint_last.pt``. The output is appended to ``DIR/train.log``
  and shown (unless ``--quiet``); the step fails unless ``DIR/checkpoint_best.pt`` exists afterwards.
- ``evaluate OUT``: ``CMD > OUT 2>&1`` (fairseq logs to either stream), written through
  ``OUT.part`` and shown (unless ``--quiet``) without fairseq-generate's per-sentence lines. Marker
  ``OUT.done``; the step is redone when a file the command names (the checkpoint, the decoded
  output) is newer than the marker.

``fetch`` downloads URL to DEST with curl unless DEST exists (a failure names the URL and says what
to do: HINT). ``device`` prints ``cpu`` or ``cuda`` (``auto``: cuda when torch sees a GPU) and
stops with one line when cuda is asked for and torch sees none (a dry run only warns).
"""

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from typing import List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# fairseq-generate's per-sentence lines (source, target, hypothesis, detokenized, scores)
_SENTENCE_LINE = re.compile(rb"^[STHDPEA]-\d+\t")
_NOT_PATH = r"A-Za-z0-9_.~/-"  # characters a path is made of


def fail(prog: str, message: str) -> None:
    print(f"{prog}: {message}", file=sys.stderr)
    sys.exit(1)


# ------------------------------------------------------------------ paths as pages show them


def _roots(root: str):
    """The spellings of the repository folder (as given, resolved, and $PWD when it is the same
    folder through a link) and the resolved parent ("" for a top-level folder)."""
    given = os.path.abspath(root)
    physical = os.path.realpath(given)
    spellings = {given, physical}
    pwd = os.environ.get("PWD")
    if pwd and os.path.isabs(pwd) and os.path.realpath(pwd) == physical:
        spellings.add(os.path.normpath(pwd))
    parent = os.path.dirname(physical)
    return sorted(spellings, key=len, reverse=True), ("" if parent == "/" else parent)


def shown(text: str, root: str = REPO) -> str:
    """TEXT with every absolute path into the repository made relative to it (the repository itself
    is ``.``) and every path beside it (in its parent folder) written ``../NAME``; other paths are
    left alone. A path starts after a character that cannot be part of one and ends before one, so
    ``/elsewhere/repo/x`` and ``repo2`` stay as they are. A relative path names the same file from
    the repository root, where the recipes run."""
    spellings, parent = _roots(root)
    start, end = rf"(?<![{_NOT_PATH}])", rf"(?![{_NOT_PATH}])"
    for r in spellings:
        text = re.sub(start + re.escape(r) + "/", "", text)
        text = re.sub(start + re.escape(r) + end, ".", text)
    if parent:
        text = re.sub(start + re.escape(parent) + "/", "../", text)
    return text


def shown_command(cmd: Sequence[str], root: str = REPO) -> str:
    """A command as one shell line with repository-relative paths (results pages, ``+`` lines)."""
    return " ".join(shlex.quote(shown(str(a), root)) for a in cmd)


def shown_line(line: str, root: str = REPO) -> str:
    """A marker's command line (``shlex.join(cmd)``, maybe with `` > OUT 2>&1``) as pages show it."""
    head, redirect, out = line.rpartition(" > ")
    if redirect and out.endswith(" 2>&1") and shlex.join(shlex.split(head)) == head:
        target = shlex.split(out[: -len(" 2>&1")])
        if len(target) == 1:
            return f"{shown_command(shlex.split(head), root)} > {shlex.quote(shown(target[0], root))} 2>&1"
    return shown_command(shlex.split(line), root)


# ------------------------------------------------------------------ markers


def read_marker(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def write_marker(path: str, line: str) -> None:
    with open(path + ".part", "w", encoding="utf-8") as f:
        f.write(line)
    os.replace(path + ".part", path)


def _mtime(path: str) -> int:
    return os.stat(path).st_mtime_ns


def newer_inputs(marker: str, cmd: Sequence[str]) -> List[str]:
    """The files named in the command (not the program), also as ``LABEL=PATH``, that are newer
    than the marker."""
    named = list(cmd[1:]) + [a.split("=", 1)[1] for a in cmd[1:] if "=" in a]
    return [a for a in named if os.path.isfile(a) and _mtime(a) > _mtime(marker)]


def is_finished(marker: str, line: str, cmd: Sequence[str] = (), fresh_check: bool = False) -> bool:
    if read_marker(marker) != line:
        return False
    return not (fresh_check and newer_inputs(marker, cmd))


def _child_env():
    return dict(os.environ, PYTHONUNBUFFERED="1")  # progress as it happens, not in 8 KB blocks


def _run_piped(cmd: Sequence[str], sinks, keep=lambda line: True) -> int:
    """Runs cmd with its output (both streams) copied line by line to every sink (binary files;
    a filtered sink gets the lines ``keep`` accepts); Ctrl-C stops the command and then this step
    (its exit status says so)."""
    proc = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_child_env()
    )
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command gets Ctrl-C itself
    try:
        for line in iter(proc.stdout.readline, b""):
            for sink, filtered in sinks:
                if not filtered or keep(line):
                    sink.write(line)
                    sink.flush()
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)


# ------------------------------------------------------------------ the steps


class Steps:
    def __init__(self, prog: str, dry_run: bool):
        self.prog = prog
        self.dry_run = dry_run

    def announce(self, line: str, finished: bool) -> bool:
        """Prints the step; true when it is to run now."""
        if finished:
            print(f"= done already: {shown_line(line)}", flush=True)
            return False
        print(f"+ {shown_line(line)}", flush=True)
        return not self.dry_run

    def fetch(self, url: str, dest: str, hint: str) -> None:
        if os.path.isfile(dest) and os.path.getsize(dest) > 0:
            return
        part = dest + ".part"
        cmd = ["curl", "-fL", "--retry", "2", "--connect-timeout", "20", "-o", part, url]
        if not self.announce(shlex.join(cmd), False):
            return
        os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
        if subprocess.call(cmd) != 0:
            if os.path.exists(part):
                os.remove(part)
            fail(self.prog, f"could not download {url}. {hint}")
        os.replace(part, dest)

    def prepare(self, directory: str, cmd: Sequence[str]) -> None:
        line = shlex.join(cmd)
        marker = os.path.join(directory, ".done")
        if not self.announce(line, is_finished(marker, line)):
            return
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        code = subprocess.call(list(cmd))
        if code != 0:
            fail(self.prog, f"step failed (exit {code}): {shown_line(line)}")
        write_marker(marker, line)

    def train(self, directory: str, cmd: Sequence[str], quiet: bool = False) -> None:
        line = shlex.join(cmd)
        marker = os.path.join(directory, ".done")
        if not self.announce(line, is_finished(marker, line)):
            return
        os.makedirs(directory, exist_ok=True)
        last = os.path.join(directory, "checkpoint_last.pt")
        if os.path.isfile(last):
            print(f"{self.prog}: resuming from {shown(last)}", flush=True)
        log = os.path.join(directory, "train.log")
        with open(log, "ab") as f:
            code = _run_piped(cmd, [(f, False)] + ([] if quiet else [(sys.stdout.buffer, False)]))
        if code != 0:
            fail(self.prog, f"training failed (exit {code}), see {shown(log)}; rerun to resume")
        if not os.path.isfile(os.path.join(directory, "checkpoint_best.pt")):
            fail(
                self.prog,
                f"training wrote no {shown(directory)}/checkpoint_best.pt, see {shown(log)}",
            )
        write_marker(marker, line)

    def evaluate(self, out: str, cmd: Sequence[str], quiet: bool = False) -> None:
        line = f"{shlex.join(cmd)} > {shlex.quote(out)} 2>&1"
        marker = out + ".done"
        finished = os.path.isfile(out) and is_finished(marker, line, cmd, fresh_check=True)
        if not self.announce(line, finished):
            return
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        part = out + ".part"
        with open(part, "wb") as f:
            shown_too = [] if quiet else [(sys.stdout.buffer, True)]
            code = _run_piped(
                cmd, [(f, False)] + shown_too, keep=lambda line: not _SENTENCE_LINE.match(line)
            )
        if code != 0:
            fail(self.prog, f"failed (exit {code}): {shown_line(line)} (its output: {shown(part)})")
        os.replace(part, out)
        write_marker(marker, line)


def choose_device(asked: str, dry_run: bool = False, prog: str = "steps.py") -> str:
    """cpu or cuda; auto is cuda when torch sees a GPU."""
    if asked not in ("auto", "cpu", "cuda"):
        fail(prog, f"DEVICE must be auto, cpu or cuda, got {asked!r}")
    if asked == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if asked == "cuda":
        built = torch.version.cuda or "none (a CPU build)"
        message = f"DEVICE=cuda but torch {torch.__version__} sees no GPU (its CUDA: {built})"
        if not dry_run:
            fail(prog, message)
        print(f"{prog}: {message}; showing the GPU plan (--dry-run)", file=sys.stderr)
        return "cuda"
    return "cpu"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="recipes/steps.py", description=__doc__.split("\n")[0])
    parser.add_argument("--prog", default="steps.py", help="the recipe, for messages")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    sub = parser.add_subparsers(dest="kind", required=True)
    p = sub.add_parser("fetch")
    p.add_argument("url")
    p.add_argument("dest")
    p.add_argument("hint")
    for kind, target in (("prepare", "DIR"), ("train", "DIR"), ("evaluate", "OUT")):
        p = sub.add_parser(kind)
        if kind != "prepare":
            p.add_argument("--quiet", action="store_true", help="output into the file only")
        p.add_argument("target", metavar=target)
        p.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("device")
    p.add_argument("asked", metavar="auto|cpu|cuda")
    args = parser.parse_args(argv)
    if args.kind == "device":
        print(choose_device(args.asked, args.dry_run, args.prog))
        return 0
    steps = Steps(args.prog, args.dry_run)
    if args.kind == "fetch":
        steps.fetch(args.url, args.dest, args.hint)
        return 0
    if not args.command:
        parser.error(f"{args.kind} needs a command")
    if args.kind == "prepare":
        steps.prepare(args.target, args.command)
    else:
        getattr(steps, args.kind)(args.target, args.command, quiet=args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
