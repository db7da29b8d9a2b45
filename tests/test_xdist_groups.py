"""The README's test command runs the suite with ``-n auto --dist loadgroup``: the tests that share
a costly fixture must run in one pytest-xdist worker, or each worker builds it again (a wheelhouse
and virtual environments, every scheme's checkpoints) or starts a second SLURM cluster. Such a
module marks itself (``pytestmark = pytest.mark.xdist_group(...)``); conftest's hook marks the
tests that use ``slurm_cluster``, before pytest-xdist reads the marks.

pytest-xdist 3.8 groups by renaming node ids, which pytest 9.2 ignores without a word (setup.py
holds pytest below it); a hook that marks tests after pytest-xdist's has no effect either. Oracle:
where a pytest run on two workers, with this suite's conftest, ran the tests of modules written
here.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

RAN = """
import os, time

import pytest


def ran(group, seconds=0.3):
    with open(os.environ["WHERE"], "a") as f:
        f.write(f"{group} {os.environ['PYTEST_XDIST_WORKER']}\\n")
    time.sleep(seconds)
"""

MODULES = {
    # costly module fixtures: the module marks itself
    "test_a_grouped.py": RAN
    + """
pytestmark = pytest.mark.xdist_group("shared")

def test_1(): ran("module")
def test_2(): ran("module")
def test_3(): ran("module")
""",
    # tests that use the cluster, among others: conftest's hook marks them
    "test_b_cluster.py": RAN
    + """
@pytest.fixture
def slurm_cluster():
    return "one cluster"

def test_1(slurm_cluster): ran("slurm")
def test_2(): ran("other", 0)
def test_3(): ran("other", 0)
def test_4(slurm_cluster): ran("slurm")
def test_5(): ran("other", 0)
def test_6(): ran("other", 0)
def test_7(slurm_cluster): ran("slurm")
""",
}


def test_tests_of_one_group_run_in_one_worker(tmp_path):
    for name, text in MODULES.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    where = tmp_path / "where.txt"
    tests_dir = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest"]
        + ["-n", "2", "--dist", "loadgroup", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "WHERE": str(where), "PYTEST_ADDOPTS": "", "PYTHONPATH": tests_dir},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = [line.split() for line in where.read_text().splitlines()]
    assert len(runs) == 10
    for group in ("module", "slurm"):
        workers = {worker for name, worker in runs if name == group}
        assert len(workers) == 1, f"the {group} group's tests ran in workers {sorted(workers)}"
