"""tools/slurm_local.sh: a one-node SLURM cluster on this machine that runs srun and submitit
jobs (the fixture is tests/slurm_kit.py's), and its one-line errors."""

import socket
import subprocess

import pytest
from slurm_kit import BASH, SCRIPT, slurm_cluster, slurm_local  # noqa: F401


def test_help_prints_the_header():
    proc = subprocess.run([BASH, SCRIPT, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout.startswith("A one-node SLURM cluster on this machine")
    assert "apt-get install slurmctld slurmd slurm-client munge" in proc.stdout


def test_start_with_a_bad_state_dir_says_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    proc = slurm_local("start", tmp_path / "file" / "state")
    assert proc.returncode == 1
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    # where the packages are missing, that is the line
    assert "cannot use" in proc.stderr or "apt-get install" in proc.stderr


def test_start_without_the_packages_says_one_line(tmp_path):
    proc = slurm_local("start", tmp_path / "state", env={"PATH": str(tmp_path)})  # no sinfo
    assert proc.returncode == 1
    assert proc.stderr.endswith(
        " not found: apt-get install slurmctld slurmd slurm-client munge is needed\n"
    )
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.slow
def test_the_cluster_runs_srun_and_submitit_jobs(slurm_cluster, tmp_path, monkeypatch):  # noqa: F811
    out = tmp_path / "hello.txt"
    # srun returns as soon as the job ends (sbatch --wait polls, up to 10 s here); submitit's
    # jobs below are sbatch's
    srun = ["srun", "--partition", slurm_cluster.partition, "sh", "-c", f"echo hello > {out}"]
    subprocess.run(srun, env=slurm_cluster.env, cwd=tmp_path, check=True, timeout=60)
    assert out.read_text() == "hello\n"

    import submitit

    monkeypatch.setenv("SLURM_CONF", slurm_cluster.conf)  # submitit runs sbatch in our environment

    def hello(name):  # nested: cloudpickle sends it by value (the job cannot import this module)
        return f"hello {name} from {socket.gethostname()}"

    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    executor.update_parameters(slurm_partition=slurm_cluster.partition, timeout_min=5)
    job = executor.submit(hello, "slurm")
    assert job.result() == f"hello slurm from {socket.gethostname()}"
