"""Installing on a machine without internet (issue 10): recipes/setup.sh's wheelhouse modes.

One wheelhouse is built for the running interpreter (``--build-wheelhouse``, which may use the
package index; torch comes from a local wheel file, or an exact pin of the installed version).
It is installed with ``--from-wheelhouse`` into a fresh virtual environment with pip cut off from
every index: ``PIP_INDEX_URL`` points at a closed port, ``PIP_CONFIG_FILE`` hides the machine's
pip.conf (its extra indexes and find-links), ``PIP_FIND_LINKS``/``PIP_EXTRA_INDEX_URL`` are empty.
Then ``fairseq-train`` of that environment trains the plugin (installed as a wheel, not this
checkout) for a few updates. A second install into the same environment keeps its torch.
Bad input (no folder, no manifest, a missing wheel, another Python version, no torch anywhere)
stops with one line before anything is installed.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import HeaderParser
from importlib.metadata import version as installed_version
from pathlib import Path

import pytest
from conftest import REPO, TINY_LM
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

pytestmark = pytest.mark.slow  # builds a wheelhouse and a virtual environment

SETUP = REPO / "recipes" / "setup.sh"
PYVER = "%d.%d" % sys.version_info[:2]
CLOSED_INDEX = "http://127.0.0.1:9/simple"  # the discard port: nothing answers


def setup_sh(*args, env=None, cwd=None, expect=0, timeout=600):
    proc = subprocess.run(
        ["bash", str(SETUP), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )
    if expect is not None and proc.returncode != expect:
        raise AssertionError(
            f"setup.sh {' '.join(map(str, args))} exited {proc.returncode} "
            f"(expected {expect})\n--- stdout ---\n{proc.stdout[-5000:]}\n"
            f"--- stderr ---\n{proc.stderr[-5000:]}"
        )
    return proc


def offline_env(**extra):
    """pip with no index at all: a closed index URL, no config files, no find-links."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PIP_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(
        PIP_INDEX_URL=CLOSED_INDEX,
        PIP_EXTRA_INDEX_URL="",
        PIP_FIND_LINKS="",
        PIP_CONFIG_FILE=os.devnull,
        PIP_RETRIES="0",
        PIP_TIMEOUT="2",
        PIP_NO_COMPILE="1",  # byte-compiling torch would take longer than the install
        PYTHON=sys.executable,
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    env.update(extra)
    return env


def local_torch_source():
    """The running torch as a local wheel file (find-links folders), else an exact pin of it.

    Either way no other torch build can come: an exact pin of the installed version is what the
    environment was set up from (on this machine, and in CI, the CPU wheel in /opt/wheels)."""
    torch_version = installed_version("torch")
    folders = os.environ.get("PIP_FIND_LINKS", "").split()
    conf = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    )
    for line in conf.stdout.splitlines():
        if re.match(r"[^=]*find-links=", line):
            folders += line.split("=", 1)[1].strip("'\"").split()
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    for folder in folders:
        for path in sorted(Path(folder).glob(f"torch-{torch_version}-{tag}-*.whl")):
            return str(path)
    return f"torch=={torch_version}"


def wheel_requires(path):
    with zipfile.ZipFile(path) as zf:
        name = next(
            n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        )
        meta = HeaderParser().parsestr(zf.read(name).decode("utf-8"))
    return [Requirement(r) for r in meta.get_all("Requires-Dist") or []]


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    dest = tmp_path_factory.mktemp("wheelhouse")
    proc = setup_sh(
        "--build-wheelhouse",
        dest,
        "--with-torch",
        local_torch_source(),
        env=dict(os.environ, PYTHON=sys.executable),
    )
    assert "torch included" in proc.stdout, proc.stdout[-3000:]
    yield dest
    shutil.rmtree(dest, ignore_errors=True)  # hundreds of MB: not kept in pytest's temp folders


def test_wheelhouse_holds_the_closure_for_this_python(wheelhouse):
    manifest = json.loads((wheelhouse / "wheelhouse.json").read_text())
    assert manifest["python_version"] == PYVER
    assert manifest["platform"] == "manylinux_2_28_x86_64"
    wheels = {w["name"]: w for w in manifest["wheels"]}
    for name in (
        "fairseq-noising",
        "ve-fairseq",
        "hydra-core",
        "omegaconf",
        "antlr4-python3-runtime",
        "numpy",
        "sacrebleu",
        "sentencepiece",
        "matplotlib",
    ):
        assert name in wheels, f"{name} missing from the manifest"
    assert "torchaudio" not in wheels and "torchaudio" in manifest["left_out"]
    assert wheels["torch"]["role"] == "torch"
    assert wheels["torch"]["version"] == installed_version("torch")
    assert wheels["fairseq-noising"]["file"].endswith("-py3-none-any.whl")
    # antlr4-python3-runtime exists only as a source distribution: built here, pure Python
    assert wheels["antlr4-python3-runtime"]["file"].endswith("-py3-none-any.whl")
    assert not any(n.startswith("torchaudio") for n in os.listdir(wheelhouse))

    here = {str(t) for t in sys_tags()}
    versions = {n: parse_wheel_filename(w["file"])[1] for n, w in wheels.items()}
    for name, w in wheels.items():
        path = wheelhouse / w["file"]
        assert path.is_file(), w["file"]
        assert {str(t) for t in parse_wheel_filename(w["file"])[3]} & here, w["file"]
        # complete: every requirement of every wheel (for this interpreter) is met inside
        for req in wheel_requires(path):
            if req.marker and not req.marker.evaluate(dict(default_environment(), extra="")):
                continue
            dep = canonicalize_name(req.name)
            if dep == "torchaudio":
                continue
            assert dep in versions, f"{name} requires {req}, which the wheelhouse lacks"
            assert req.specifier.contains(versions[dep], prereleases=True), (name, str(req))
    # torch's own needs only come with torch; the plugin's wheels never need torch's alone
    assert {w["role"] for w in manifest["wheels"]} <= {"plugin", "torch", "torch-only"}


@pytest.fixture
def venv(tmp_path):
    yield tmp_path / "env"
    shutil.rmtree(tmp_path / "env", ignore_errors=True)  # a whole torch: not kept either


def test_install_without_index_then_train(wheelhouse, ptb_small_bin, venv, tmp_path):
    env = offline_env(VENV=str(venv))
    first = setup_sh("--from-wheelhouse", wheelhouse, env=env, cwd=tmp_path)
    out = first.stdout + first.stderr
    # pip looked only at the wheelhouse: no index was even named, let alone reached
    looked = [l for l in out.splitlines() if "Looking in" in l or "127.0.0.1:9" in l]
    assert looked == [f"Looking in links: {wheelhouse}"], looked
    assert "fairseq-noising ready: torch" in out, out[-3000:]
    python = venv / "bin" / "python"

    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util, fairseq_noising, torch, fairseq; "
            "print(fairseq_noising.__file__); print(torch.__version__); print(torch.__file__); "
            "print(importlib.util.find_spec('torchaudio'))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=True,
    )
    plugin_file, torch_version, torch_file, torchaudio = probe.stdout.split()
    assert Path(plugin_file).is_relative_to(venv), plugin_file  # the wheel, not this checkout
    assert torch_version == installed_version("torch")
    assert torchaudio == "None"
    before = os.stat(torch_file).st_mtime_ns

    # installing again into that environment (by its interpreter) keeps its torch
    second = setup_sh("--from-wheelhouse", wheelhouse, "--python", python, env=env, cwd=tmp_path)
    out = second.stdout + second.stderr
    assert f"keeping torch {torch_version}" in out, out[-3000:]
    looked = [l for l in out.splitlines() if "Looking in" in l or "127.0.0.1:9" in l]
    assert looked == [f"Looking in links: {wheelhouse}"], looked
    assert "warning" not in out, out[-3000:]
    assert os.stat(torch_file).st_mtime_ns == before

    save_dir = tmp_path / "ckpt"
    train = subprocess.run(
        [
            str(venv / "bin" / "fairseq-train"),
            str(ptb_small_bin),
            "--user-dir",
            str(Path(plugin_file).parent),
            "--task",
            "noised_language_modeling",
            "--noise-scheme",
            "kn",
            "--noise-gamma",
            "0.2",
            "--tokens-per-sample",
            "35",
            *TINY_LM,
            "--cpu",
            "--num-workers",
            "0",
            "--log-format",
            "simple",
            "--batch-size",
            "20",
            "--required-batch-size-multiple",
            "1",
            "--max-update",
            "3",
            "--optimizer",
            "adam",
            "--lr",
            "0.001",
            "--seed",
            "1",
            "--no-epoch-checkpoints",
            "--save-dir",
            str(save_dir),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    log = train.stdout + train.stderr
    assert train.returncode == 0, log[-5000:]
    assert re.search(r"noising \S+ with kn, gamma_0=0.2", log), log[-3000:]
    assert re.search(r"num_updates 3\b", log) and "done training" in log, log[-3000:]
    assert (save_dir / "checkpoint_last.pt").is_file()


# ---------------------------------------------------------------- bad input


@pytest.fixture
def bare_python(tmp_path):
    """A virtual environment with nothing in it (not even pip): nothing may land there."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True
    )
    return tmp_path / "bare" / "bin" / "python"


def site_contents(python):
    return sorted(p.name for p in python.parent.parent.glob("lib/python*/site-packages/*"))


def partial_copy(wheelhouse, dest, drop=(), edit=None):
    """A wheelhouse of links to the real wheels, without the files of `drop`, manifest edited."""
    dest.mkdir()
    manifest = json.loads((wheelhouse / "wheelhouse.json").read_text())
    for w in manifest["wheels"]:
        if w["name"] not in drop:
            os.symlink(wheelhouse / w["file"], dest / w["file"])
    if edit:
        edit(manifest)
    (dest / "wheelhouse.json").write_text(json.dumps(manifest))
    return dest


def one_line_error(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("wheelhouse: error: "), lines
    assert "Processing" not in proc.stdout and "Successfully" not in proc.stdout
    return lines[0]


def test_bad_input_stops_with_one_line_before_installing(wheelhouse, bare_python, tmp_path):
    env = offline_env(VENV=str(tmp_path / "never-made"))
    empty = site_contents(bare_python)

    def fails(folder):
        proc = setup_sh("--from-wheelhouse", folder, "--python", bare_python, env=env, expect=2)
        return one_line_error(proc)

    assert "does not exist" in fails(tmp_path / "no-such-folder")
    (tmp_path / "plain").mkdir()
    assert "has no wheelhouse.json" in fails(tmp_path / "plain")

    lacking = partial_copy(wheelhouse, tmp_path / "lacking", drop={"sacrebleu"})
    msg = fails(lacking)
    assert "lacks the wheel of sacrebleu" in msg, msg

    other = "3.12" if PYVER != "3.12" else "3.11"
    elsewhere = partial_copy(
        wheelhouse, tmp_path / "other-python", edit=lambda m: m.update(python_version=other)
    )
    msg = fails(elsewhere)
    assert f"built for Python {other}" in msg and f"is Python {PYVER}" in msg, msg

    def without_torch(m):
        m["wheels"] = [w for w in m["wheels"] if w["role"] == "plugin"]

    no_torch = partial_copy(wheelhouse, tmp_path / "no-torch", drop={"torch"}, edit=without_torch)
    msg = fails(no_torch)
    assert "has no torch" in msg and "--with-torch" in msg, msg

    # the default target (VENV, to be created) is not created on bad input either
    one_line_error(setup_sh("--from-wheelhouse", lacking, env=env, expect=2))
    assert not (tmp_path / "never-made").exists()
    assert site_contents(bare_python) == empty

    # building refuses an unpinned torch (a multi-GB CUDA download) before fetching anything
    proc = setup_sh(
        "--build-wheelhouse",
        tmp_path / "wh",
        "--with-torch",
        "torch",
        expect=2,
        env=dict(os.environ, PYTHON=sys.executable),
    )
    assert "exact pin" in one_line_error(proc)
    assert not (tmp_path / "wh").exists()
