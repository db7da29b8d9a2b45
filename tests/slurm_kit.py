"""A one-node SLURM cluster on this machine for the tests (``tools/slurm_local.sh``): the
session fixture ``slurm_cluster``, which test modules import with
``from slurm_kit import slurm_cluster  # noqa: F401``.

Where Debian's packages are missing the fixture installs them with apt-get (as root only), else
the tests that use it are skipped with one line saying why.
"""

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, processes_naming

SCRIPT = REPO / "tools" / "slurm_local.sh"
BASH = shutil.which("bash") or "/bin/bash"
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
PROGRAMS = ["sinfo", "sbatch", "slurmctld", "slurmd", "munged"]
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
APT_TIMEOUT = 600  # seconds, each of apt-get update and apt-get install


@dataclass
class SlurmCluster:
    state_dir: Path
    env: dict  # os.environ with SLURM_CONF naming the cluster's slurm.conf
    partition: str = "local"

    @property
    def conf(self) -> str:
        return self.env["SLURM_CONF"]


def missing_programs():
    return [p for p in PROGRAMS if shutil.which(p, path=SEARCH_PATH) is None]


def _install_packages():
    """apt-get installs PACKAGES; None when done, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("apt-get") is None:
        return "no apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=APT_TIMEOUT, env=env
            )
        except subprocess.TimeoutExpired:
            return f"{' '.join(argv[:2])} took over {APT_TIMEOUT} s"
        if proc.returncode != 0:
            last = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
            return f"{' '.join(argv[:2])} exited {proc.returncode}: {last}"
    still = missing_programs()
    return f"{', '.join(still)} still missing" if still else None


def _free_port_pair() -> int:
    """A port p such that p and p + 1 (slurmctld's and slurmd's) are free on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise RuntimeError("no two consecutive free ports on 127.0.0.1")


def slurm_local(command, state_dir, env=None, timeout=120):
    return subprocess.run(
        [BASH, str(SCRIPT), command, str(state_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running one-node cluster (``SlurmCluster``), stopped at the end of the session."""
    if missing_programs():
        why = _install_packages()
        if why:
            pytest.skip(
                f"SLURM test skipped: could not install Debian's {' '.join(PACKAGES)} ({why})"
            )
    if os.geteuid() != 0:
        pytest.skip("SLURM test skipped: tools/slurm_local.sh start needs root")
    state_dir = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "PATH": SEARCH_PATH, "SLURM_LOCAL_PORT": str(_free_port_pair())}
    proc = slurm_local("start", state_dir, env)
    if proc.returncode != 0:
        slurm_local("stop", state_dir, env)
        raise AssertionError(f"slurm_local.sh start exited {proc.returncode}: {proc.stderr}")
    env["SLURM_CONF"] = str(state_dir / "slurm.conf")
    assert proc.stdout.strip() == f"export SLURM_CONF={env['SLURM_CONF']}"
    try:
        yield SlurmCluster(state_dir, env)
    finally:
        proc = slurm_local("stop", state_dir, env)
        assert proc.returncode == 0, proc.stderr
        assert processes_naming(f"{state_dir}/") == [], "daemons still running after stop"
