"""The NVIDIA Multi-Process Service (MPS) for runs that share one GPU: their kernels run side by
side instead of taking turns. :func:`mps_daemon` starts a daemon of its own (its folders under
``folder``: it neither meets nor stops another), checks that CUDA connects, and stops it when the
``with`` block ends; every refusal is one line before anything runs (:func:`check`: those that
need no daemon).

    with mps_daemon(work / "mps", prog="ptb.sh", flag="MPS=1", device="cuda") as env:
        subprocess.Popen(cmd, env={**os.environ, **env})

``python recipes/mps.py --folder DIR [--prog NAME] -- CMD...`` runs CMD (a whole sweep)
under one and exits with CMD's status; ``--check`` only refuses or accepts.
"""

import argparse
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from typing import Dict, Iterator, Optional

CONTROL = "nvidia-cuda-mps-control"
# a CUDA process that connects: under MPS, its first CUDA call goes through the daemon's server
PROBE = [
    sys.executable,
    "-c",
    "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()",
]


def _fail(prog: str, message: str) -> None:
    raise SystemExit(f"{prog}: {message}")


def _control(env: Dict[str, str], command: Optional[str], timeout: float):
    """Runs nvidia-cuda-mps-control (``-d`` when command is None, else the command on its stdin)."""
    args = [CONTROL] + (["-d"] if command is None else [])
    try:
        return subprocess.run(
            args,
            input=None if command is None else command + "\n",
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None


def _daemon_answers(env: Dict[str, str]) -> bool:
    proc = _control(env, "get_server_list", timeout=10)
    return proc is not None and proc.returncode == 0


def check(prog: str, flag: str, device: str) -> None:
    """The refusals that need no daemon: a device other than cuda, no control program."""
    if device != "cuda":
        _fail(prog, f"{flag} needs a CUDA device (MPS shares one GPU), got device {device}")
    if shutil.which(CONTROL) is None:
        _fail(prog, f"{flag} needs {CONTROL} (part of the NVIDIA driver) on PATH; it is not there")


@contextmanager
def mps_daemon(
    folder: str, prog: str, flag: str = "MPS=1", device: str = "cuda"
) -> Iterator[Dict[str, str]]:
    """Starts an MPS control daemon in ``folder`` (pipe/, log/); yields the variables that point a
    CUDA process at it; stops it when the block ends."""
    check(prog, flag, device)
    folder = os.path.abspath(folder)
    env = {
        "CUDA_MPS_PIPE_DIRECTORY": os.path.join(folder, "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": os.path.join(folder, "log"),
    }
    for path in env.values():
        os.makedirs(path, exist_ok=True)
    log = os.path.join(env["CUDA_MPS_LOG_DIRECTORY"], "control.log")
    if _daemon_answers(env):
        _fail(
            prog,
            f"an MPS daemon already serves {env['CUDA_MPS_PIPE_DIRECTORY']} (is another run "
            f"using this folder?); stop it with: echo quit | "
            f"CUDA_MPS_PIPE_DIRECTORY={env['CUDA_MPS_PIPE_DIRECTORY']} {CONTROL}",
        )
    started = _control(env, None, timeout=30)
    if started is None or started.returncode != 0:
        code = "no answer in 30 s" if started is None else f"exit {started.returncode}"
        _fail(prog, f"{flag}: {CONTROL} -d did not start ({code}); see {log}")
    try:
        if not _daemon_answers(env):
            _fail(prog, f"{flag}: the MPS daemon does not answer; see {log}")
        try:
            probe = subprocess.run(
                PROBE, env={**os.environ, **env}, capture_output=True, text=True, timeout=120
            )
            error = probe.returncode != 0 and (probe.stderr.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            error = "no answer in 120 s"
        if error:
            _fail(
                prog,
                f"{flag}: a CUDA process cannot connect to the MPS daemon ({error}); see {log}",
            )
        print(f"{prog}: MPS daemon started ({env['CUDA_MPS_PIPE_DIRECTORY']})", flush=True)
        yield env
    finally:
        stopped = _control(env, "quit", timeout=30)
        if stopped is None or stopped.returncode != 0:
            print(f"{prog}: the MPS daemon did not stop; see {log}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mps.py", description="CMD under a CUDA MPS daemon")
    parser.add_argument("--folder", help="the daemon's pipe and log folders")
    parser.add_argument("--prog", default="mps.py", help="the name in messages")
    parser.add_argument(
        "--flag", default="running a command under MPS", help="what asked for MPS, in messages"
    )
    parser.add_argument("--check", action="store_true", help="refuse or accept, run nothing")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.check and not (command and args.folder):
        parser.error("expected --folder DIR -- CMD... (or --check)")
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.check:
        check(args.prog, args.flag, device)
        return 0
    with mps_daemon(args.folder, args.prog, flag=args.flag, device=device) as env:
        return subprocess.call(command, env={**os.environ, **env})


if __name__ == "__main__":
    sys.exit(main())
