#!/usr/bin/env python3
"""The steps of the reproduction recipes: print each command, skip it when it is finished, run it.

    python recipes/steps.py [--prog NAME] [--dry-run] fetch URL DEST HINT
    python recipes/steps.py [--prog NAME] [--dry-run] prepare DIR CMD...
    python recipes/steps.py [--prog NAME] [--dry-run] --queue FILE train DIR CMD...
    python recipes/steps.py [--prog NAME] [--dry-run] --queue FILE evaluate [--optional] OUT CMD...
    python recipes/steps.py [--prog NAME] [--dry-run] device auto|cpu|cuda [--mps 0|1]

The recipes (``recipes/_common.sh`` names one shell function after each kind) call it once per
command. A step prints ``+ CMD``, or ``= done already: CMD`` when it finished before; with
``--dry-run`` it prints and runs nothing. Printed commands show paths relative to the repository
(``shown``), as the results pages do. ``prepare`` runs its command at once. ``train`` and
``evaluate`` are added to the queue FILE, which ``recipes/rows.py`` then runs, several side by side
(:class:`Step` says where each one's output and marker go).

A step has finished when its marker holds exactly its command (``shlex.join`` of the arguments):

- ``prepare DIR``: marker ``DIR/.done``. An unfinished step starts again from an empty DIR.
- ``train DIR``: marker ``DIR/.done``. An unfinished step starts again in the same save dir, so
  fairseq resumes from ``DIR/checkpoint_last.pt``.
- ``evaluate OUT``: ``CMD > OUT 2>&1``, marker ``OUT.done``; the step is redone when a file the
  command names (the checkpoint, the decoded output) is newer than the marker.

``fetch`` downloads URL to DEST with curl unless DEST exists (a failure names the URL and says what
to do: HINT). ``device`` prints ``cpu`` or ``cuda`` (``auto``: cuda when torch sees a GPU) and
stops with one line when cuda is asked for and torch sees none (a dry run only warns), or when
``--mps 1`` is given for a CPU or without ``nvidia-cuda-mps-control``.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


@dataclass
class Step:
    """A training or an evaluation: what it runs, where its output and its marker go.

    ``train``: TARGET is the save dir; output appended to ``TARGET/train.log``; marker
    ``TARGET/.done``; finished when the marker holds the command. ``evaluate``: TARGET is the output
    file, written through ``TARGET.part``; marker ``TARGET.done``; finished when the marker holds
    the command line and no file the command names is newer. ``optional``: a step the recipe can do
    without (an analysis), which a time budget may skip or cut short."""

    kind: str  # "train" or "evaluate"
    target: str
    cmd: List[str]
    optional: bool = False

    @property
    def line(self) -> str:
        line = shlex.join(self.cmd)
        return line if self.kind == "train" else f"{line} > {shlex.quote(self.target)} 2>&1"

    @property
    def folder(self) -> str:
        """The folder the step writes into (a run folder, for a training)."""
        return self.target if self.kind == "train" else os.path.dirname(self.target)

    @property
    def marker(self) -> str:
        return os.path.join(self.target, ".done") if self.kind == "train" else self.target + ".done"

    @property
    def output(self) -> str:
        return (
            os.path.join(self.target, "train.log")
            if self.kind == "train"
            else self.target + ".part"
        )

    @property
    def name(self) -> str:
        """How status lines name it: the run folder, and the output file of an evaluation."""
        run = os.path.basename(self.folder)
        return run if self.kind == "train" else f"{run}/{os.path.basename(self.target)}"

    def finished(self) -> bool:
        if self.kind == "train":
            return is_finished(self.marker, self.line)
        return os.path.isfile(self.target) and is_finished(self.marker, self.line, self.cmd, True)

    def needs(self, other: "Step") -> bool:
        """Whether this step reads what ``other`` writes (a checkpoint of its save dir, its output)."""
        named = (
            [self.target] + list(self.cmd[1:]) + [a.split("=", 1)[1] for a in self.cmd if "=" in a]
        )
        if other.kind == "train":
            return any(a.startswith(other.target.rstrip("/") + "/") for a in named)
        return other.target in named[1:]

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def queued(path: str) -> List[Step]:
    """The steps of a queue file (one JSON object a line), in order."""
    try:
        with open(path, encoding="utf-8") as f:
            return [Step(**json.loads(line)) for line in f if line.strip()]
    except FileNotFoundError:
        return []


# ------------------------------------------------------------------ the steps


class Steps:
    def __init__(self, prog: str, dry_run: bool, queue: Optional[str] = None):
        self.prog = prog
        self.dry_run = dry_run
        self.queue_file = queue

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

    def queue(self, step: Step) -> None:
        """Announces a training or an evaluation and, unless it is finished, adds it to the queue
        that ``recipes/rows.py`` runs."""
        if not self.announce(step.line, step.finished()):
            return
        if self.queue_file is None:
            fail(self.prog, f"{step.kind} steps are queued: give --queue FILE")
        os.makedirs(os.path.dirname(os.path.abspath(self.queue_file)), exist_ok=True)
        if step.kind == "train":  # the run's command, for the pages written while it waits
            os.makedirs(step.target, exist_ok=True)
            write_marker(os.path.join(step.target, ".command"), step.line)
        with open(self.queue_file, "a", encoding="utf-8") as f:
            f.write(step.to_json() + "\n")


def check_mps(device: str, prog: str) -> None:
    """MPS=1 needs a CUDA device and the MPS control program (recipes/mps.py starts it later)."""
    from mps import CONTROL

    if device != "cuda":
        fail(prog, f"MPS=1 needs DEVICE=cuda (MPS shares one GPU between the rows), got {device}")
    if shutil.which(CONTROL) is None:
        fail(prog, f"MPS=1 needs {CONTROL} (part of the NVIDIA driver) on PATH; it is not there")


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
    parser.add_argument("--queue", metavar="FILE", help="where train and evaluate steps are queued")
    sub = parser.add_subparsers(dest="kind", required=True)
    p = sub.add_parser("fetch")
    p.add_argument("url")
    p.add_argument("dest")
    p.add_argument("hint")
    for kind, target in (("prepare", "DIR"), ("train", "DIR"), ("evaluate", "OUT")):
        p = sub.add_parser(kind)
        if kind == "evaluate":
            p.add_argument("--optional", action="store_true", help="a time budget may skip it")
        p.add_argument("target", metavar=target)
        p.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("device")
    p.add_argument("asked", metavar="auto|cpu|cuda")
    p.add_argument("--mps", default="0", help="MPS=1: the rows share the GPU under CUDA MPS")
    args = parser.parse_args(argv)
    if args.kind == "device":
        device = choose_device(args.asked, args.dry_run, args.prog)
        if args.mps == "1":
            check_mps(device, args.prog)
        print(device)
        return 0
    steps = Steps(args.prog, args.dry_run, args.queue)
    if args.kind == "fetch":
        steps.fetch(args.url, args.dest, args.hint)
        return 0
    if not args.command:
        parser.error(f"{args.kind} needs a command")
    if args.kind == "prepare":
        steps.prepare(args.target, args.command)
    else:
        steps.queue(Step(args.kind, args.target, args.command, getattr(args, "optional", False)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
