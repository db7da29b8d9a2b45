"""Installing on a machine without internet: recipes/setup.sh's wheelhouse modes.

One wheelhouse is built for the running interpreter (``--build-wheelhouse``, which may use the
package index; torch comes from a local wheel file, or an exact pin of the installed version).
It is installed with ``--from-wheelhouse`` with pip cut off from every index: ``PIP_INDEX_URL``
points at a closed port, ``PIP_CONFIG_FILE`` hides the machine's pip.conf (its extra indexes and
find-links), ``PIP_FIND_LINKS``/``PIP_EXTRA_INDEX_URL`` are empty. Into a fresh virtual environment
(torch from the wheelhouse), whose ``fairseq-train`` then trains the plugin (installed as a wheel,
not this checkout) for a few updates; and, with ``--python python3``, into an existing environment
that holds its own torch, like a machine image whose ``python3`` is a virtual environment: that
torch is kept, untouched; and, built ``--target-has`` a list of what such an environment holds,
a wheelhouse of only what it lacks. The plugin's wheel carries the MIT licence and the package metadata.
Bad input (no folder, no manifest, a missing or damaged wheel, another Python version, a wheel
that does not suit the interpreter, no torch anywhere, no pip) stops with one line before
anything is installed.
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
from types import SimpleNamespace

import pytest
from conftest import REPO, TINY_LM
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

# slow: builds a wheelhouse and virtual environments; one pytest-xdist worker: they are built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("offline_install")]

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
    environment was set up from (in the development image and in CI, the CPU wheel in
    /opt/wheels)."""
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


def wheel_metadata(path):
    """The METADATA of a wheel, parsed, and the names of the files in it."""
    with zipfile.ZipFile(path) as zf:
        name = next(
            n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        )
        return HeaderParser().parsestr(zf.read(name).decode("utf-8")), zf.namelist()


def wheel_requires(path):
    return [Requirement(r) for r in wheel_metadata(path)[0].get_all("Requires-Dist") or []]


def manifest_of(wheelhouse):
    return json.loads((wheelhouse / "wheelhouse.json").read_text())


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
    manifest = manifest_of(wheelhouse)
    assert manifest["python_version"] == PYVER
    assert manifest["platform"] == "manylinux_2_28_x86_64"
    assert "manylinux2014_x86_64" in manifest["platforms"]
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
        assert wheels[name]["role"] == "plugin", wheels[name]
    assert "torchaudio" not in wheels and "torchaudio" in manifest["left_out"]
    # the Hydra launchers accept hydra-core pre-releases: the plugin holds it to a release
    for name in ("hydra-core", "omegaconf", "hydra-joblib-launcher", "hydra-submitit-launcher"):
        assert not Version(wheels[name]["version"]).is_prerelease, wheels[name]
    assert wheels["torch"]["role"] == "torch"
    assert wheels["torch"]["version"] == installed_version("torch")
    assert wheels["fairseq-noising"]["file"].endswith("-py3-none-any.whl")
    # antlr4-python3-runtime exists only as a source distribution: built here, pure Python
    assert wheels["antlr4-python3-runtime"]["file"].endswith("-py3-none-any.whl")
    assert not any(n.startswith("torchaudio") for n in os.listdir(wheelhouse))
    assert sorted(n for n in os.listdir(wheelhouse) if n.endswith(".whl")) == sorted(
        w["file"] for w in manifest["wheels"]
    ), "the folder holds exactly the manifest's wheels (no placeholder, no stray download)"

    here = {str(t) for t in sys_tags()}
    versions = {n: parse_wheel_filename(w["file"])[1] for n, w in wheels.items()}
    needs = {}  # name: names of what it requires (for this interpreter)
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
            needs.setdefault(name, set()).add(dep)
    # the roles: "plugin" is what the plugin needs without going through torch, "torch-only" the
    # rest of what torch needs
    plugin, todo = set(), ["fairseq-noising"]
    while todo:
        name = todo.pop()
        if name not in plugin and name != "torch":
            plugin.add(name)
            todo += needs.get(name, [])
    roles = {n: w["role"] for n, w in wheels.items()}
    expected = {n: "plugin" if n in plugin else "torch-only" for n in wheels}
    assert roles == dict(expected, torch="torch")


def test_the_plugin_wheel_carries_its_licence_and_metadata(wheelhouse):
    wheels = {w["name"]: w for w in manifest_of(wheelhouse)["wheels"]}
    path = wheelhouse / wheels["fairseq-noising"]["file"]
    meta, files = wheel_metadata(path)
    licence = (REPO / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "2026 the fairseq-noising authors" in licence
    found = [f for f in files if ".dist-info/" in f and f.rsplit("/", 1)[-1] == "LICENSE"]
    assert len(found) == 1, files
    with zipfile.ZipFile(path) as zf:
        assert zf.read(found[0]).decode() == licence
    assert meta["License-File"] == "LICENSE"
    assert "MIT" in (meta["License"], meta["License-Expression"])
    classifiers = meta.get_all("Classifier") or []
    for classifier in (
        "License :: OSI Approved :: MIT License",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ):
        assert classifier in classifiers, classifiers
    supported = SpecifierSet(meta["Requires-Python"])
    assert "3.11" in supported and "3.12" in supported and "3.10" not in supported
    assert meta["Author"] and meta["Keywords"]


def only_the_wheelhouse_looked_at(out, wheelhouse):
    """pip looked only at the wheelhouse: no index was even named, let alone reached."""
    looked = [l for l in out.splitlines() if "Looking in" in l or "127.0.0.1:9" in l]
    assert looked == [f"Looking in links: {wheelhouse}"], looked


READY = re.compile(r"fairseq-noising ready: torch (\S+), fairseq \S+, --user-dir (\S+)")


@pytest.fixture(scope="module")
def fresh_venv(wheelhouse, tmp_path_factory):
    """VENV, missing before, made by --from-wheelhouse with no index; and what that printed.

    Run from the checkout, as a user does, where ``fairseq_noising`` is a folder beside them."""
    root = tmp_path_factory.mktemp("fresh")
    proc = setup_sh(
        "--from-wheelhouse", wheelhouse, env=offline_env(VENV=str(root / "env")), cwd=REPO
    )
    yield root / "env", proc.stdout + proc.stderr
    shutil.rmtree(root / "env", ignore_errors=True)  # a whole torch: not kept either


def test_install_without_index_then_train(wheelhouse, fresh_venv, ptb_small_bin, tmp_path):
    venv, out = fresh_venv
    only_the_wheelhouse_looked_at(out, wheelhouse)
    assert "warning" not in out and "keeping torch" not in out, out[-3000:]
    ready = READY.search(out)
    assert ready and ready[1] == installed_version("torch"), out[-3000:]
    plugin_dir = Path(ready[2])
    assert plugin_dir.is_relative_to(venv), plugin_dir  # the wheel, not this checkout
    assert not list(venv.glob("lib/python*/site-packages/torchaudio*"))

    save_dir = tmp_path / "ckpt"
    train = subprocess.run(
        [
            str(venv / "bin" / "fairseq-train"),
            str(ptb_small_bin),
            "--user-dir",
            str(plugin_dir),
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
        env=offline_env(),
        timeout=600,
    )
    log = train.stdout + train.stderr
    assert train.returncode == 0, log[-5000:]
    assert re.search(r"noising \S+ with kn, gamma_0=0.2", log), log[-3000:]
    assert re.search(r"num_updates 3\b", log) and "done training" in log, log[-3000:]
    assert (save_dir / "checkpoint_last.pt").is_file()


TORCH_STATE = """import json, os, sys
from importlib.metadata import distribution
dist = distribution("torch")
files = [dist.locate_file(f) for f in dist.files
         if str(f) == "torch/__init__.py" or f.name == "RECORD"]
print(json.dumps({"prefix": sys.prefix, "version": dist.version,
                  "files": {str(f): os.stat(f).st_mtime_ns for f in files}}))"""


def test_install_into_an_image_environment_keeps_its_torch(wheelhouse, fresh_venv, tmp_path):
    """A machine image's python3 is a virtual environment that holds its own torch: with
    ``--python python3`` (a command, found on PATH, as setup.sh's own Python is) the plugin goes
    into that environment, and its torch is left as it was. The image here: the fresh
    environment less the plugin's packages, so its torch is the one the wheelhouse was built
    with (the local torch wheel, or the exact pin of the running torch)."""
    venv = fresh_venv[0]
    env = offline_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    del env["PYTHON"]  # setup.sh runs the image's python3 too, which has no packaging
    python3 = shutil.which("python3", path=env["PATH"])
    assert python3 == str(venv / "bin" / "python3")
    plugin_wheels = [w for w in manifest_of(wheelhouse)["wheels"] if w["role"] == "plugin"]
    subprocess.run(
        [python3, "-m", "pip", "uninstall", "-q", "-y", *(w["name"] for w in plugin_wheels)],
        env=env,
        check=True,
    )
    before = torch_state(python3, env)
    assert Path(before["prefix"]) == venv and len(before["files"]) == 2, before

    proc = setup_sh("--from-wheelhouse", wheelhouse, "--python", "python3", env=env, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    only_the_wheelhouse_looked_at(out, wheelhouse)
    assert f"keeping torch {before['version']} of {python3}" in out, out[-3000:]
    assert "warning" not in out, out[-3000:]
    assert f"installing {len(plugin_wheels)} wheels" in out, out[-3000:]
    installed = re.search(r"^Successfully installed (.*)$", out, re.M)[1].split()
    assert sorted(installed) == sorted(f"{w['name']}-{w['version']}" for w in plugin_wheels)
    ready = READY.search(out)
    assert ready and ready[1] == before["version"], out[-3000:]
    assert Path(ready[2]).is_relative_to(venv), ready[2]  # into the image's environment

    assert torch_state(python3, env) == before  # the same torch, its files untouched


def pip_in(python, *args, env):
    return subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )


def torch_state(python, env):
    proc = subprocess.run([python, "-c", TORCH_STATE], env=env, capture_output=True, text=True)
    return json.loads(proc.stdout)


LACKING = {"fairseq-noising", "ve-fairseq", "hydra-core", "omegaconf"}


@pytest.fixture(scope="module")
def image(wheelhouse, fresh_venv, tmp_path_factory):
    """A machine image's environment (the fresh one) that lacks four of the plugin's packages,
    its python3 first on PATH; the rest listed with ``pip list --format=freeze``, and a
    wheelhouse built ``--target-has`` that list. Built from the first wheelhouse as pip's only
    source (the index's versions, as that build chose them, without asking the index again),
    the plugin's wheel with the running environment's setuptools."""
    venv, root = fresh_venv[0], tmp_path_factory.mktemp("image")
    env = offline_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    del env["PYTHON"]  # setup.sh runs the image's python3 too
    python3 = venv / "bin" / "python3"
    pip_in(python3, "uninstall", "-q", "-y", *LACKING, env=env)
    freeze = pip_in(python3, "list", "--format=freeze", env=env).stdout
    (root / "target.txt").write_text(freeze)
    local = dict(
        os.environ, PYTHON=sys.executable, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse)
    )
    local["PIP_NO_BUILD_ISOLATION"] = "0"  # pip reads it inverted: --no-build-isolation
    setup_sh("--build-wheelhouse", root / "house", "--target-has", root / "target.txt", env=local)
    return SimpleNamespace(python3=python3, env=env, freeze=freeze, house=root / "house")


def test_a_new_environment_over_an_image_sees_it_and_leaves_it_as_it_was(image, tmp_path):
    """``--over python3``: a new environment over the image's (itself a virtual environment, as
    a GPU image's python3 is): the wheels the image lacks land there, the image's torch and
    the rest are used from the image, whose packages and torch files stay as they were."""
    env, python3 = {**image.env, "VENV": str(tmp_path / "over")}, image.python3
    pip_in(python3, "uninstall", "-q", "-y", *LACKING, env=env)  # as the fixture left it
    torch_before = torch_state(python3, env)
    proc = setup_sh("--from-wheelhouse", image.house, "--over", "python3", env=env, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    only_the_wheelhouse_looked_at(out, image.house)
    assert "warning" not in out, out[-3000:]
    over = tmp_path / "over"
    assert f"creating {over} over the environment of {python3}" in out, out[-3000:]
    assert f"keeping torch {torch_before['version']} of {over / 'bin' / 'python'}" in out
    installed = re.search(r"^Successfully installed (.*)$", out, re.M)[1].split()
    assert sorted(n.rpartition("-")[0] for n in installed) == sorted(LACKING)
    ready = READY.search(out)
    assert ready and ready[1] == torch_before["version"], out[-3000:]
    assert Path(ready[2]).is_relative_to(over), ready[2]  # the plugin from the new environment
    own = site_contents(over / "bin" / "python")
    assert "over.pth" in own and "fairseq_noising" in own and not [n for n in own if "torch" in n]
    assert (over / "bin" / "fairseq-hydra-train").read_text().startswith(f"#!{over}/bin/python")

    # the image: the same packages, its torch's files untouched
    assert pip_in(python3, "list", "--format=freeze", env=env).stdout == image.freeze
    assert torch_state(python3, env) == torch_before


def test_a_wheelhouse_of_what_the_target_lacks(wheelhouse, image, tmp_path):
    """``--target-has``: the image environment lacks four of the plugin's packages and lists
    the rest with ``pip list --format=freeze``. The wheelhouse built for it holds those four
    alone and leaves the others to it, at its versions; installed there, the four land, and
    nothing else is touched. A target that lost one of the packages left to it, or has another
    version of a pinned one, stops with one line before anything is installed; a pin that the
    plugin's requirements exclude stops the build."""
    env, python3, freeze, house, lacking = (
        image.env,
        image.python3,
        image.freeze,
        image.house,
        LACKING,
    )
    pip_in(python3, "uninstall", "-q", "-y", *lacking, env=env)  # as the fixture left it
    has = dict(line.split("==") for line in freeze.split())
    has = {canonicalize_name(n): v for n, v in has.items()}
    online = dict(os.environ, PYTHON=sys.executable)
    manifest = manifest_of(house)
    assert {w["name"] for w in manifest["wheels"]} == lacking
    assert sorted(n for n in os.listdir(house) if n.endswith(".whl")) == sorted(
        w["file"] for w in manifest["wheels"]
    )
    kept = {k["name"]: k["version"] for k in manifest["target_has"]}
    closure = {w["name"] for w in manifest_of(wheelhouse)["wheels"] if w["role"] == "plugin"}
    assert set(kept) == closure - lacking and "numpy" in kept and "torch" not in kept
    assert kept == {n: has[n] for n in kept}

    # a target that lost a package left to it: one line, nothing installed
    gone = "bitarray"
    pip_in(python3, "uninstall", "-q", "-y", gone, env=env)
    proc = setup_sh("--from-wheelhouse", house, "--python", "python3", env=env, expect=2)
    msg = one_line_error(proc)
    assert f"leaves {gone} {has[gone]} to the target" in msg and f"lacks {gone}" in msg, msg
    files = {w["name"]: w["file"] for w in manifest_of(wheelhouse)["wheels"]}
    pip_in(python3, "install", "-q", "--no-index", "--no-deps", wheelhouse / files[gone], env=env)

    # another version of a pinned one: likewise
    def pinned_elsewhere(m):
        next(k for k in m["target_has"] if k["name"] == "numpy")["version"] = "0.0.1"

    moved = partial_copy(house, tmp_path / "moved", edit=pinned_elsewhere)
    proc = setup_sh("--from-wheelhouse", moved, "--python", "python3", env=env, expect=2)
    msg = one_line_error(proc)
    assert "leaves numpy 0.0.1" in msg and f"has numpy {has['numpy']}" in msg, msg

    proc = setup_sh("--from-wheelhouse", house, "--python", "python3", env=env, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    only_the_wheelhouse_looked_at(out, house)
    assert "warning" not in out, out[-3000:]
    installed = re.search(r"^Successfully installed (.*)$", out, re.M)[1].split()
    assert sorted(installed) == sorted(f"{w['name']}-{w['version']}" for w in manifest["wheels"])
    assert READY.search(out), out[-3000:]
    after = pip_in(python3, "list", "--format=freeze", env=env).stdout.split()
    assert set(freeze.split()) <= set(after)  # what the target had, as it was

    # the target's pins constrain the build: one the plugin's requirements exclude stops it
    (tmp_path / "old.txt").write_text("hydra-core==1.1.0\n")
    proc = setup_sh(
        "--build-wheelhouse",
        tmp_path / "wh",
        "--target-has",
        tmp_path / "old.txt",
        env=online,
        expect=2,
    )
    msg = one_line_error(proc)
    assert "hydra-core==1.1.0" in msg, msg


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


def partial_copy(wheelhouse, dest, drop=(), edit=None, replace=None):
    """A wheelhouse of links to the real wheels, without the files of `drop`, with replace's
    {name: path} files instead of theirs (the manifest left as it was), manifest edited."""
    dest.mkdir()
    manifest = manifest_of(wheelhouse)
    for w in manifest["wheels"]:
        if w["name"] in (replace or {}):
            shutil.copy(replace[w["name"]], dest / w["file"])
        elif w["name"] not in drop:
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
    never_made = tmp_path / "never-made"
    env = offline_env(VENV=str(never_made))
    empty = site_contents(bare_python)

    def fails(folder, *target):
        target = target or ("--python", bare_python)
        proc = setup_sh("--from-wheelhouse", folder, *target, env=env, expect=2)
        return one_line_error(proc)

    assert "does not exist" in fails(tmp_path / "no-such-folder")
    (tmp_path / "plain").mkdir()
    assert "has no wheelhouse.json" in fails(tmp_path / "plain")
    assert "--python no-such-python: no such executable" in fails(
        wheelhouse, "--python", "no-such-python"
    )
    assert "--over no-such-python: no such executable" in fails(
        wheelhouse, "--over", "no-such-python"
    )
    assert "give one" in fails(wheelhouse, "--python", bare_python, "--over", bare_python)

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

    # a wheel whose bytes are not those the manifest recorded
    files = {w["name"]: w["file"] for w in manifest_of(wheelhouse)["wheels"]}
    other_bytes = {"sacrebleu": wheelhouse / files["tabulate"]}
    damaged = partial_copy(wheelhouse, tmp_path / "damaged", replace=other_bytes)
    msg = fails(damaged)
    assert "damaged" in msg and files["sacrebleu"] in msg, msg

    assert "has no pip" in fails(wheelhouse)  # everything else in order
    assert "has no pip" in fails(wheelhouse, "--over", bare_python)  # checked as PY, not made

    # a wheel that does not suit the interpreter: pip's dry run finds it (here with the pip of
    # this Python, which would make the virtual environment)
    macos = files["sacrebleu"].replace("py3-none-any", "cp311-cp311-macosx_11_0_arm64")

    def on_macos(m):
        entry = next(w for w in m["wheels"] if w["name"] == "sacrebleu")
        os.replace(tmp_path / "macos" / entry["file"], tmp_path / "macos" / macos)
        entry["file"] = macos

    assert macos != files["sacrebleu"]
    shipped = {"sacrebleu": wheelhouse / files["sacrebleu"]}
    macos_house = partial_copy(wheelhouse, tmp_path / "macos", replace=shipped, edit=on_macos)
    msg = fails(macos_house, "--venv", never_made)
    assert "do not install into" in msg and "sacrebleu" in msg, msg

    # the default target (VENV, to be created) is not created on bad input either
    one_line_error(setup_sh("--from-wheelhouse", lacking, env=env, expect=2))
    assert not never_made.exists()
    assert site_contents(bare_python) == empty

    # building refuses bad flags (an unpinned torch is a multi-GB CUDA download) before fetching
    # or making anything
    (tmp_path / "bad.txt").write_text("numpy==2.0\nnumpy>=2\n")
    (tmp_path / "torch.txt").write_text("torch==2.11.0+cu130\n")
    for flags, expected in (
        (["--target-has", tmp_path / "bad.txt"], "bad.txt, line 2: expected NAME==VERSION"),
        (["--target-has", tmp_path / "none.txt"], "none.txt: cannot be read"),
        (["--target-has", tmp_path / "torch.txt", "--with-torch", "torch==2.13.0"], "lists torch"),
        (["--with-torch", "torch"], "exact pin"),
        (["--with-torch", "torch>=2"], "exact pin"),
        (["--with-torch", tmp_path / "torch-2.0-none.whl"], "no such torch wheel"),
        (["--python-version", "3.10"], "--python-version must be 3.11 or newer"),
        (["--platform", "win_amd64"], "--platform takes a manylinux tag"),
    ):
        proc = setup_sh(
            "--build-wheelhouse",
            tmp_path / "wh",
            *flags,
            expect=2,
            env=dict(os.environ, PYTHON=sys.executable),
        )
        assert expected in one_line_error(proc)
    assert not (tmp_path / "wh").exists()
