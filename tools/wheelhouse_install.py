"""``wheelhouse.py install``: the wheelhouse checked against the target interpreter, then installed
with no index, keeping the target's torch; or into a new environment over the target's
(docs/wheelhouse.md)."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from wheelhouse_common import FORMAT, MANIFEST, Error, last_error, pip, say, sha256

PROBE = """import importlib.util, json, sys
from importlib.metadata import PackageNotFoundError, version
def have(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None
torch = importlib.util.find_spec("torch") and version("torch")
pip = importlib.util.find_spec("pip") is not None
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "torch": torch, "pip": pip,
                  "has": {n: have(n) for n in sys.argv[1:]}}))"""
READY = """import os, torch, fairseq, fairseq_noising
print(f"fairseq-noising ready: torch {torch.__version__}, fairseq {fairseq.__version__}, "
      f"--user-dir {os.path.dirname(fairseq_noising.__file__)}")"""


# over.pth: one line, run when the new environment starts, adding the site directories of the
# interpreter it is made over, in its order (their .pth files read too)
OVER_PTH = """import site
print("import site;", *(f"site.addsitedir({p!r});" for p in site.getsitepackages()))"""


def run_python(python, code, *args, flags=()):
    proc = subprocess.run([str(python), *flags, "-c", code, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise Error(f"{python}: {(proc.stderr.strip().splitlines() or ['failed'])[-1]}")
    return proc.stdout.strip()


def read_manifest(folder):
    if not folder.is_dir():
        raise Error(f"wheelhouse folder {folder} does not exist")
    if not (folder / MANIFEST).is_file():
        raise Error(f"{folder} has no {MANIFEST}: not a wheelhouse (see --build-wheelhouse)")
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        assert manifest["format"] == FORMAT and manifest["wheels"] and manifest["python_version"]
    except Exception:
        raise Error(f"{folder / MANIFEST} is not a wheelhouse manifest of format {FORMAT}")
    return manifest


def make_venv(venv, python, over):
    """A new virtual environment made by ``python``; over its environment: one that sees
    ``python``'s packages (its torch, pip), as ``python`` sees them, also where that is itself a
    virtual environment (which ``--system-site-packages`` would not see), and nothing of its own."""
    flags = ["--without-pip"] if over else []
    subprocess.run([str(python), "-m", "venv", *flags, str(venv)], check=True)
    new = venv / "bin" / "python"
    if over:
        purelib = run_python(new, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
        (Path(purelib) / "over.pth").write_text(run_python(python, OVER_PTH) + "\n")
    return new


def install(args):
    folder = Path(args.dir).resolve()
    manifest, venv = read_manifest(folder), Path(args.venv).resolve()
    # the target: --python (a path or a command), or --venv, made if missing (over --over's)
    create = over = None
    if args.python and args.over:
        raise Error(
            "--python installs into PY's environment, --over into a new one over it: give one"
        )
    for flag, command in (("--python", args.python), ("--over", args.over)):
        if command and not shutil.which(command):  # links not resolved: a venv's python is one
            raise Error(f"{flag} {command}: no such executable")
    if args.python:
        python = shutil.which(args.python)
    elif (venv / "bin" / "python").exists():
        python = venv / "bin" / "python"
    elif venv.exists() and any(venv.iterdir()):
        raise Error(f"--venv {venv} is a folder but not a virtual environment (no bin/python)")
    elif args.over:  # checked against PY, whose packages the new environment will see
        python = over = shutil.which(args.over)
        create = venv
    else:
        python, create = sys.executable, venv
    kept = manifest.get("target_has", [])
    try:
        info = json.loads(run_python(python, PROBE, *(k["name"] for k in kept)))
    except (Error, ValueError):
        raise Error(f"{python} does not run as a Python interpreter (3.8 or newer)")
    have, want = info["python"], manifest["python_version"]
    if have != want:
        raise Error(f"{folder} was built for Python {want}, but {python} is Python {have}")
    empty = create and not over  # a new environment of its own has nothing yet
    torch_here = None if empty else info["torch"]
    for k in kept:  # what the wheelhouse leaves to the target must be there, as it was pinned
        there = None if empty else info["has"][k["name"]]
        if there is None or (k["version"] and there != k["version"]):
            found = f"has {k['name']} {there}" if there else f"lacks {k['name']}"
            raise Error(
                f"{folder} leaves {k['name']} {k['version'] or '(any version)'} to the target "
                f"(built --target-has), but {create or python} {found}"
            )
    wheels = [w for w in manifest["wheels"] if w["role"] == "plugin" or not torch_here]
    if not torch_here and not any(w["role"] == "torch" for w in wheels):
        raise Error(
            f"{'the new environment ' + str(create) if create else python} has no torch and "
            f"wheelhouse {folder} has none: install your torch build there first, or build the "
            "wheelhouse with --with-torch torch==VERSION"
        )
    for w in wheels:
        if not (folder / w["file"]).is_file():
            raise Error(f"{folder} lacks the wheel of {w['name']} {w['version']}: {w['file']}")
        if sha256(folder / w["file"]) != w["sha256"]:
            raise Error(f"{folder / w['file']} is damaged: its sha256 is not the manifest's")
    if not info["pip"]:
        raise Error(f"{python} has no pip (python -m ensurepip installs it offline)")
    offline = ["--no-index", "--find-links", folder, "--no-deps"]
    offline += [f"{w['name']}=={w['version']}" for w in wheels]
    proc = pip("install", "--dry-run", "--ignore-installed", *offline, python=python)
    if proc.returncode != 0:
        raise Error(f"the wheels of {folder} do not install into {python}: {last_error(proc)}")

    if create:
        say(f"creating {create} {'over the environment of' if over else 'with'} {python}")
        python = make_venv(create, python, over)
    if torch_here:
        say(f"keeping torch {torch_here} of {python}")
    say(f"installing {len(wheels)} wheels from {folder} into {python}, no index")
    if pip("install", *offline, python=python, capture=False).returncode != 0:
        raise Error(f"pip install from {folder} failed (its output is above)")
    left_out = set(manifest["left_out"]) - {"torch"}  # pip check, less what is left out on purpose
    for line in pip("check", python=python).stdout.splitlines():
        if (
            line.strip()
            and not line.startswith("No broken")
            and not any(re.search(rf"requires {n}\b", line) for n in left_out)
        ):
            say(f"warning: {line}")
    # -P: not the caller's directory first on sys.path, so that run from a checkout the line
    # names the installed plugin, not the checkout's (the wheels need Python >= 3.11, which has -P)
    print(run_python(python, READY, flags=("-P",)))
