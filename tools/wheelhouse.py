#!/usr/bin/env python3
"""Install fairseq-noising on a machine without internet: build a wheelhouse, install from it.

    python tools/wheelhouse.py build DIR [--python-version 3.12] [--platform PLAT]
                                           [--with-torch torch==2.13.0 | --with-torch FILE.whl]
                                           [--target-has FILE]
    python tools/wheelhouse.py install DIR [--python PY | --venv DIR]

``build`` (needs a package index) puts into DIR a wheel of the plugin and of all it needs but
torch, for one Python version and manylinux platform, as ``pip download --only-binary=:all:
--python-version X.Y --platform ...`` resolves and fetches them. pip gets torch and torchaudio as
empty placeholder wheels, so that it neither fetches nor follows them: the target's own torch
build (CUDA or not) is kept, and torchaudio, which ve-fairseq lists but fairseq imports only in
its speech tasks, pins one torch version. A package published only as a source distribution
(antlr4-python3-runtime) is built into a wheel (``pip wheel --no-deps``), which must then suit the
target (pure Python does). ``--with-torch`` adds one exact torch and what it needs (a second
``pip download``, held to the versions chosen before). ``--target-has FILE`` names what the
target already has, as ``python -m pip list --format=freeze`` prints it there (``NAME==VERSION``
lines; a bare ``NAME`` means any version): pip resolves against those versions (constraints), and
the target's packages are left out of DIR; a torch there is the one the placeholders claim.
pip evaluates environment markers for the Python that runs it: where they differ between
versions, build with the target's version.
DIR/wheelhouse.json records the Python version, the platforms, every wheel (name, version,
file, sha256, role: plugin, torch, or torch-only for what only torch needs) and what is left to
the target (``target_has``: name and pinned version, or none).

``install`` (no index) checks DIR against the target interpreter first (the manifest, the Python
version, torch installed there or shipped, what is left to the target there at its pinned
version, every wheel needed present and intact, then a ``pip install --dry-run`` of them there)
and stops with one line before anything is installed. Then it runs ``pip install --no-index
--find-links DIR --no-deps name==version ...``: where the target has torch, only the plugin's
wheels, keeping that torch; otherwise all of them.
"""

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANIFEST = "wheelhouse.json"
FORMAT = 1
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"
LEFT_OUT = {
    "torch": "the target's own torch build is kept (--with-torch adds one)",
    "torchaudio": "fairseq imports it only in its speech tasks, and it pins one torch version",
}
# the version the placeholders claim (else --with-torch's): it must meet what the packages and
# pip's constraints ask of torch and torchaudio
PLACEHOLDER_VERSION = "2.13.0"
LEGACY = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}  # glibc 2.x they stand for


class Error(Exception):
    """Bad input: printed as one line."""


def say(msg):
    print(f"wheelhouse: {msg}", flush=True)


def pip(*args, python=sys.executable, capture=True):
    cmd = [str(python), "-m", "pip", "--disable-pip-version-check", *map(str, args)]
    return subprocess.run(cmd, capture_output=capture, text=True)


def last_error(proc):
    lines = [l.strip() for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
    return ([l for l in lines if l.startswith("ERROR")] or lines or ["no output"])[-1]


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def name_version(wheel):
    """(canonical name, version) from a wheel's file name."""
    name, version = Path(wheel).name.split("-")[:2]
    return canonical(name), version


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------- build


def target_platforms(platform):
    """A manylinux platform and every older one that a glibc of that age also runs."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    m = m or re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", platform)
    if not m:
        raise Error(f"--platform takes a manylinux tag ({DEFAULT_PLATFORM}), got {platform!r}")
    out = []
    for glibc in range(LEGACY.get(m[1]) or int(m[1]), 4, -1):
        legacy = [f"{name}_{m[2]}" for name, g in LEGACY.items() if g == glibc]
        out += [f"manylinux_2_{glibc}_{m[2]}", *legacy]
    return out


def torch_request(spec):
    """--with-torch checked: (requirement for pip or None, torch version to claim)."""
    if spec is None:
        return None, PLACEHOLDER_VERSION
    if spec.endswith(".whl"):
        path = Path(spec)
        if not path.is_file() or name_version(path)[0] != "torch":
            raise Error(f"--with-torch {spec}: no such torch wheel file")
        return str(path.resolve()), name_version(path)[1]
    m = re.fullmatch(r"\s*torch\s*===?\s*([\w.+!]+)\s*", spec)
    if not m:
        raise Error(f"--with-torch takes an exact pin (torch==X.Y.Z) or a wheel, got {spec!r}")
    return f"torch=={m[1]}", m[1]


def target_has(path):
    """--target-has FILE read: {canonical name: pinned version or None}. Lines as pip's
    ``list --format=freeze`` and ``freeze`` print them; a ``NAME @ URL`` line counts as NAME at
    any version; blank lines, comments and ``-e`` lines are skipped."""
    if path is None:
        return {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise Error(f"--target-has {path}: cannot be read ({e.strerror})")
    has = {}
    for number, line in enumerate(lines, 1):
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][\w.-]*)\s*(?:==\s*([\w.+!]+)|@\s*\S+)?", line)
        if not m:
            raise Error(
                f"--target-has {path}, line {number}: expected NAME==VERSION or NAME, got {line!r}"
            )
        has[canonical(m[1])] = m[2]
    return has


def placeholder(folder, name, version):
    """An empty wheel: pip takes it for name==version, which needs nothing."""
    d, path = f"{name}-{version}.dist-info", folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{d}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{d}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{d}/RECORD", "")
    return path


def build_plugin(dest):
    """pip wheel --no-deps of this repository, from a copy (no build/ or egg-info in the tree)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(REPO / "fairseq_noising", src / "fairseq_noising", ignore=ignore)
        for name in ("setup.py", "README.md", "LICENSE"):
            shutil.copy2(REPO / name, src / name)
        proc = pip("wheel", "--no-deps", "-w", dest, src)
    built = list(dest.glob("fairseq_noising-*.whl"))
    if proc.returncode != 0 or len(built) != 1:
        raise Error(f"building the fairseq-noising wheel failed: {last_error(proc)}")
    return built[0]


def download(tmp, sub, target, args):
    """pip download (args: requirements and options) into tmp/sub, returning the wheels there.
    A requirement with no wheel for the target is built from its source distribution into
    tmp/built (pip wheel --no-deps; pip finds it there), then pip tries again."""
    tried, built, dest = set(), tmp / "built", tmp / sub
    while True:
        proc = pip("download", "-d", dest, "--find-links", built, *args)
        if proc.returncode == 0:
            return sorted(dest.glob("*.whl"))
        out = proc.stdout + proc.stderr
        wanted = set(re.findall(r"(?:satisfies the requirement|depends on) ([^\s;]+)", out))
        wanted -= tried | {r for r in wanted if canonical(re.match(r"[\w.-]*", r)[0]) in LEFT_OUT}
        if not wanted:  # a conflict, or a wheel built here that does not suit the target
            why = [l.strip() for l in out.splitlines() if " depends on " in l or "requested" in l]
            raise Error(f"no wheels for {target}: {'; '.join(why) or last_error(proc)}")
        for req in sorted(wanted):
            say(f"{req}: no wheel for {target}, building one from its source distribution")
            proc = pip("wheel", "--no-deps", "-w", built, req)
            if proc.returncode != 0:
                raise Error(f"{req} has no wheel for {target}, nor builds: {last_error(proc)}")
        tried |= wanted


def build(args):
    version, m = args.python_version, re.fullmatch(r"3\.(\d+)", args.python_version)
    if not m or int(m[1]) < 11:
        raise Error(f"--python-version must be 3.11 or newer (ve-fairseq), got {version!r}")
    platforms = target_platforms(args.platform)
    torch_req, claimed = torch_request(args.with_torch)
    has = target_has(args.target_has)
    if torch_req and "torch" in has:
        raise Error(
            f"--with-torch: --target-has {args.target_has} lists torch, which the target keeps"
        )
    if has.get("torch"):  # the stand-ins claim the target's torch (its public version)
        claimed = has["torch"].split("+")[0]
    dest, target = Path(args.dir).resolve(), f"CPython {version} on {args.platform}"
    if dest.exists() and not dest.is_dir():
        raise Error(f"{dest} exists and is not a folder")
    flags = ["--only-binary=:all:", "--implementation=cp", f"--python-version={version}"]
    flags += [f"--platform={p}" for p in platforms]
    dest.mkdir(parents=True, exist_ok=True)
    say(f"building a wheelhouse for {target} in {dest}")
    if version != "%d.%d" % sys.version_info[:2]:
        say(f"note: pip evaluates environment markers for this Python, {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(dir=dest, prefix=".building-") as tmp:
        tmp = Path(tmp)
        for sub in ("built", "plugin", "torch", "placeholders"):
            (tmp / sub).mkdir()
        if torch_req:  # first: a torch that does not suit the target stops it early
            download(tmp, "torch", target, [*flags, "--no-deps", torch_req])
        plugin = build_plugin(tmp / "built")
        say(f"built {plugin.name}; fetching what it needs")
        stand_ins = [placeholder(tmp / "placeholders", n, claimed) for n in LEFT_OUT]
        pinned = tmp / "target-has.txt"  # the target's versions, but the stand-ins'
        pinned.write_text("".join(f"{n}=={v}\n" for n, v in has.items() if v and n not in LEFT_OUT))
        wheels, kept = {}, {}  # name: (path, role); name: version the target has
        for w in download(tmp, "plugin", target, [*flags, "-c", pinned, plugin, *stand_ins]):
            name = name_version(w)[0]
            if name in LEFT_OUT:
                continue
            if name in has:
                kept[name] = has[name]
            else:
                wheels[name] = (w, "plugin")
        if torch_req:  # torch and what it needs, held to the versions chosen above
            pins = tmp / "constraints.txt"
            held = "".join(f"{n}=={name_version(w)[1]}\n" for n, (w, _) in wheels.items())
            pins.write_text(held + pinned.read_text())  # and the target's own versions
            for w in download(tmp, "torch", target, [*flags, "-c", pins, torch_req]):
                name = name_version(w)[0]
                wheels.setdefault(name, (w, "torch" if name == "torch" else "torch-only"))
        listed = []
        for name, (w, role) in sorted(wheels.items()):
            w = w.replace(dest / w.name)
            listed.append(dict(name=name, version=name_version(w)[1], file=w.name, role=role))
            listed[-1]["sha256"] = sha256(w)
    manifest = {
        "format": FORMAT,
        "python_version": version,
        "platform": args.platform,
        "platforms": platforms,
        "left_out": {k: v for k, v in LEFT_OUT.items() if not (k == "torch" and torch_req)},
        "target_has": [dict(name=n, version=v) for n, v in sorted(kept.items())],
        "wheels": listed,
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    size = sum((dest / w["file"]).stat().st_size for w in listed) / 2**20
    say(
        f"{len(listed)} wheels ({size:.0f} MiB) for {target} in {dest}, listed in {MANIFEST}; "
        f"torch {'included' if torch_req else 'not included'}"
    )
    if kept:
        say(f"left to the target ({args.target_has}): {', '.join(sorted(kept))}")
    say(f"install offline: bash recipes/setup.sh --from-wheelhouse {dest} [--python PY]")


# ---------------------------------------------------------------- install

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


def install(args):
    folder = Path(args.dir).resolve()
    manifest, venv = read_manifest(folder), Path(args.venv).resolve()
    create = None  # the target: --python (a path or a command), or --venv, made if missing
    if args.python:  # links not resolved: a virtual environment's python is one
        python = shutil.which(args.python)
        if not python:
            raise Error(f"--python {args.python}: no such executable")
    elif (venv / "bin" / "python").exists():
        python = venv / "bin" / "python"
    elif venv.exists() and any(venv.iterdir()):
        raise Error(f"--venv {venv} is a folder but not a virtual environment (no bin/python)")
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
    torch_here = None if create else info["torch"]
    for k in kept:  # what the wheelhouse leaves to the target must be there, as it was pinned
        there = None if create else info["has"][k["name"]]
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
        say(f"creating {create} with {python}")
        subprocess.run([str(python), "-m", "venv", str(create)], check=True)
        python = create / "bin" / "python"
    if torch_here:
        say(f"keeping torch {torch_here} of {python}")
    say(f"installing {len(wheels)} wheels from {folder} into {python}, no index")
    if pip("install", *offline, python=python, capture=False).returncode != 0:
        raise Error(f"pip install from {folder} failed (its output is above)")
    left_out = set(manifest["left_out"]) - {"torch"}  # pip check, less what is left out on purpose
    for line in pip("check", python=python).stdout.splitlines():
        if line.strip() and not any(re.search(rf"requires {n}\b", line) for n in left_out):
            say(f"warning: {line}")
    # -P: not the caller's directory first on sys.path, so that run from a checkout the line
    # names the installed plugin, not the checkout's (the wheels need Python >= 3.11, which has -P)
    print(run_python(python, READY, flags=("-P",)))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="wheelhouse", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download and build the wheels into DIR (needs an index)")
    b.add_argument("dir")
    here = "%d.%d" % sys.version_info[:2]
    b.add_argument("--python-version", default=here, help="target Python (default: %(default)s)")
    b.add_argument("--platform", default=DEFAULT_PLATFORM, help="manylinux tag (%(default)s)")
    b.add_argument("--with-torch", metavar="SPEC", help="add torch: torch==VERSION or a wheel file")
    b.add_argument(
        "--target-has", metavar="FILE", help="the target's pip list --format=freeze: left out"
    )
    i = sub.add_parser("install", help="install from DIR with no index")
    i.add_argument("dir")
    i.add_argument("--python", help="the target environment's interpreter (path or command)")
    i.add_argument("--venv", default=str(REPO / ".venv"), help="else this venv, made if missing")
    args = parser.parse_args(argv)
    try:
        (build if args.command == "build" else install)(args)
    except Error as e:
        print(f"wheelhouse: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
