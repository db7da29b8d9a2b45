"""tools/gpu_session.sh, the driver of a lent GPU session: its plans are checked here, on a CPU,
against the recipes' own dry runs, so that a GPU session does not find a mistake by spending its
device time. Each job must train exactly one run, the jobs together must train exactly the runs the
final command reads (so that it finds every step done), and nothing may ask for the CPU."""

import os
import shlex
import subprocess

import pytest
from conftest import REPO, require_shared

VENV = str(REPO / ".venv")
pytestmark = pytest.mark.slow


def plan(name, tmp_path, **env):
    proc = subprocess.run(
        ["bash", "tools/gpu_session.sh", "plan"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PLAN": name, "GPU_RUNS": str(tmp_path / "runs"), **env},
    )
    return proc


def dry_run(command, env):
    """The training save dirs of the recipe command (``VAR=value ... bash recipes/X.sh``) run with
    --dry-run, and its output."""
    proc = subprocess.run(
        ["bash", "-c", f"env {command} --dry-run"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "VENV": VENV, **env},
    )
    assert proc.returncode == 0, (command, proc.stderr[-2000:])
    trained = []
    for line in proc.stdout.splitlines():
        if line.startswith("+ ") and "fairseq-train" in line:
            args = shlex.split(line[2:])
            trained.append(args[args.index("--save-dir") + 1])
            assert "--cpu" not in args
    return trained, proc.stdout


@pytest.mark.parametrize("name", ["ptb-medium", "ptb-large", "multi30k", "quickstart ptb-large"])
def test_every_plan_is_what_the_final_pages_read(name, tmp_path):
    data = {"GPU_PTB": str(require_shared("ptb")), "GPU_MULTI30K": str(require_shared("multi30k"))}
    proc = plan(name, tmp_path, **data)
    assert proc.returncode == 0, proc.stderr
    jobs = [line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("job ")]
    finals = [
        line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("final: ")
    ]
    env = {"GAMMAS": "0.1 0.2", "GAMMAS_kn": "0.2 0.4"}  # the plan's grids, exported to its jobs
    trained = []
    for job in jobs:
        runs, out = dry_run(job, env)
        assert len(runs) == (2 if "quickstart.sh" in job else 1), (job, runs)
        trained += runs
        assert "dry run" in out
    assert len(set(trained)) == len(trained)
    read = []
    for final in finals:
        read += dry_run(final, env)[0]
    quickstart = [run for run in trained if "/quickstart/" in run]  # the quick start's own page
    assert sorted(read) == sorted(run for run in trained if run not in quickstart)
    counts = {"ptb-medium": 7, "ptb-large": 3, "multi30k": 13, "quickstart ptb-large": 5}
    assert len(trained) == counts[name]
    if name == "multi30k":
        assert sum("transformer_iwslt_de_en-adam" in run for run in trained) == 2


def test_an_unknown_plan_is_one_line(tmp_path):
    proc = plan("quickstart ptb-huge", tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "gpu_session.sh: PLAN must name quickstart, ptb-medium, ptb-large or multi30k, "
        "got 'ptb-huge'\n"
    )
