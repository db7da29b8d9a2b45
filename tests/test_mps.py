"""fairseq_noising/sweep/mps.py (recipes/mps.py): a CUDA MPS daemon of a sweep's own (MPS=1 in the recipes), tested on the CPU
with a stand-in nvidia-cuda-mps-control that records how it was called: started, checked, the
command run with the daemon's folders in its environment, stopped after, also when the command
fails or is interrupted; a daemon that does not start or answer, or a machine without CUDA, is
one line before the command runs."""

import os
import subprocess
import sys

import pytest
from conftest import REPO

from fairseq_noising.sweep import mps

STAND_IN = """#!/bin/sh
# nvidia-cuda-mps-control stand-in: records each call (arguments, pipe folder, stdin)
log="$MPS_RECORD"
if [ "$1" = -d ]; then
  echo "-d $CUDA_MPS_PIPE_DIRECTORY" >> "$log"
  [ -n "$MPS_FAIL_START" ] && exit 1
  touch "$CUDA_MPS_PIPE_DIRECTORY/running"
  exit 0
fi
read -r command
echo "$command $CUDA_MPS_PIPE_DIRECTORY" >> "$log"
case "$command" in
  get_server_list) [ -f "$CUDA_MPS_PIPE_DIRECTORY/running" ] && [ -z "$MPS_DEAF" ] ;;
  quit) rm -f "$CUDA_MPS_PIPE_DIRECTORY/running" ;;
esac
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """The stand-in first on PATH, torch told it sees a GPU, and a CUDA probe that only checks
    that it was pointed at the daemon's pipe folder. Returns the file of recorded calls."""
    import torch

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    control = bin_dir / "nvidia-cuda-mps-control"
    control.write_text(STAND_IN)
    control.chmod(0o755)
    record = tmp_path / "mps-calls"
    record.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MPS_RECORD", str(record))
    probe = "import os, sys; sys.exit(not os.path.isdir(os.environ['CUDA_MPS_PIPE_DIRECTORY']))"
    monkeypatch.setattr(mps, "PROBE", [sys.executable, "-c", probe])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return record


def calls(record):
    return [line.split()[0] for line in record.read_text().splitlines()]


@pytest.mark.parametrize("status", [0, 3])
def test_the_command_runs_under_the_daemon_which_is_stopped_after(status, stand_in, tmp_path):
    seen = tmp_path / "seen"
    # the command records the pipe folder it was pointed at and whether the daemon was running
    pipe_var = "os.environ['CUDA_MPS_PIPE_DIRECTORY']"
    script = (
        f"import os; open({str(seen)!r}, 'w').write("
        f"{pipe_var} + ' ' + str(os.path.exists(os.path.join({pipe_var}, 'running'))))"
    )
    command = [sys.executable, "-c", f"{script}; raise SystemExit({status})"]
    assert mps.main(["--folder", str(tmp_path / "mps"), "--", *command]) == status
    pipe = tmp_path / "mps" / "pipe"
    assert seen.read_text() == f"{pipe} True"
    assert not (pipe / "running").exists()
    # answered before -d (no daemon of ours yet), started, answered, then stopped
    assert calls(stand_in) == ["get_server_list", "-d", "get_server_list", "quit"]


def test_the_daemon_is_stopped_on_ctrl_c(stand_in, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mps.subprocess, "call", interrupted)
    with pytest.raises(KeyboardInterrupt):
        mps.main(["--folder", str(tmp_path / "mps"), "--", "true"])
    assert calls(stand_in)[-1] == "quit"


@pytest.mark.parametrize(
    "setting, message",
    [
        ("MPS_FAIL_START", "t.sh: MPS=1: nvidia-cuda-mps-control -d did not start (exit 1)"),
        ("MPS_DEAF", "t.sh: MPS=1: the MPS daemon does not answer"),
    ],
)
def test_a_daemon_that_does_not_start_or_answer_is_one_line_before_the_command(
    setting, message, stand_in, tmp_path, monkeypatch
):
    monkeypatch.setenv(setting, "1")
    ran = tmp_path / "ran"
    with pytest.raises(SystemExit) as stopped:
        argv = ["--folder", str(tmp_path / "mps"), "--prog", "t.sh", "--flag", "MPS=1"]
        mps.main([*argv, "--", "touch", str(ran)])
    assert str(stopped.value).startswith(message) and "\n" not in str(stopped.value)
    assert not ran.exists()
    if setting == "MPS_DEAF":
        assert calls(stand_in)[-1] == "quit"  # the daemon that did start is stopped again


def test_a_daemon_already_serving_the_folder_is_not_taken_over(stand_in, tmp_path):
    pipe = tmp_path / "mps" / "pipe"
    pipe.mkdir(parents=True)
    (pipe / "running").touch()  # another sweep's daemon
    with pytest.raises(SystemExit, match="an MPS daemon already serves .*mps/pipe"):
        mps.main(["--folder", str(tmp_path / "mps"), "--", "true"])
    assert calls(stand_in) == ["get_server_list"] and (pipe / "running").exists()


def test_without_cuda_it_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "recipes" / "mps.py"), "--folder", str(tmp_path), "--", "true"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    # run directly, not by a recipe's MPS=1: the line does not speak of MPS=1
    assert proc.stderr.strip().splitlines()[-1] == (
        "mps.py: running a command under MPS needs a CUDA device (MPS shares one GPU), got "
        "device cpu"
    )
