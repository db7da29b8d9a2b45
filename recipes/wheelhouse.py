#!/usr/bin/env python3
"""Install fairseq-noising on a machine without internet: build a wheelhouse, install from it.

    python recipes/wheelhouse.py build DIR [--python-version 3.12] [--platform PLAT]
                                           [--with-torch torch==2.13.0 | --with-torch FILE.whl]
    python recipes/wheelhouse.py install DIR [--python /path/to/python | --venv DIR]

``build`` (needs a package index) puts into DIR every wheel the plugin needs besides torch, for one
Python version and platform: the plugin itself, ve-fairseq and the closure of their requirements,
resolved here for the target (markers evaluated for it, one version per package) and downloaded
with ``pip download --only-binary=:all: --no-deps --python-version X.Y --platform ...`` (one call
per level of the requirement tree). A package published only as a
source distribution (antlr4-python3-runtime) is built into a wheel, which must then suit the
target (pure Python does). torch is left out (the machine's own build, CUDA or not, is kept);
``--with-torch`` adds one exact torch wheel and torch's own requirements. torchaudio is left out
too: ve-fairseq lists it, but fairseq imports it only inside its speech tasks, and torchaudio
releases pin one torch version, so installing it would pull a different torch. DIR/wheelhouse.json
records the Python version, the platforms and every wheel (name, version, file, sha256).

``install`` (no index) checks DIR against the target interpreter first (the manifest, the Python
version, every wheel present and intact, torch available), then runs
``pip install --no-index --find-links DIR --no-deps name==version ...`` for the manifest's wheels,
keeping the torch already installed there. Bad input stops it with one line before anything is
installed.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ImportError:  # an interpreter without packaging: pip's copy
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.tags import compatible_tags, cpython_tags
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

REPO = Path(__file__).resolve().parents[1]
MANIFEST = "wheelhouse.json"
FORMAT = 1
PROG = "wheelhouse"
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"
# never in the wheelhouse (torch only through --with-torch)
LEFT_OUT = {
    "torch": "the target's own torch build is kept (--with-torch adds one)",
    "torchaudio": "fairseq imports it only in its speech tasks, and it pins one torch version",
}
LEGACY_MANYLINUX = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}


class Error(Exception):
    """Bad input: printed as one line."""


def say(msg):
    print(f"{PROG}: {msg}", flush=True)


# ---------------------------------------------------------------- target description


def parse_python_version(text):
    m = re.fullmatch(r"(\d+)\.(\d+)", text or "")
    if not m:
        raise Error(f"--python-version must look like 3.12, got {text!r}")
    version = (int(m.group(1)), int(m.group(2)))
    if version < (3, 11):
        raise Error(
            f"--python-version {text}: the wheelhouse supports Python >= 3.11 "
            "(ve-fairseq); older Pythons need the official fairseq, which has no wheels"
        )
    return version


def expand_platform(platform):
    """A manylinux platform and every older manylinux one a glibc of that age also runs."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", platform)
    legacy = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", platform)
    if legacy:
        glibc_minor, arch = LEGACY_MANYLINUX[legacy.group(1)], legacy.group(2)
    elif m and m.group(1) == "2":
        glibc_minor, arch = int(m.group(2)), m.group(3)
    else:
        raise Error(
            f"--platform must be a manylinux platform tag such as {DEFAULT_PLATFORM} or "
            f"manylinux2014_x86_64, got {platform!r}"
        )
    out = []
    for minor in range(glibc_minor, 4, -1):
        out.append(f"manylinux_2_{minor}_{arch}")
        out += [f"{name}_{arch}" for name, m2 in LEGACY_MANYLINUX.items() if m2 == minor]
    return out, arch


def target_tags(version, platforms):
    interp = f"cp{version[0]}{version[1]}"
    tags = list(cpython_tags(version, abis=[interp], platforms=platforms))
    tags += list(compatible_tags(version, interp, platforms))
    return {str(t) for t in tags}


def wheel_tags(filename):
    return {str(t) for t in parse_wheel_filename(filename)[3]}


def marker_environment(version, arch):
    env = default_environment()
    full = f"{version[0]}.{version[1]}.0"
    env.update(
        python_version=f"{version[0]}.{version[1]}",
        python_full_version=full,
        implementation_name="cpython",
        implementation_version=full,
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        os_name="posix",
        platform_machine=arch,
    )
    return env


# ---------------------------------------------------------------- wheels


def wheel_requirements(path):
    """The Requires-Dist lines of a wheel's METADATA."""
    with zipfile.ZipFile(path) as zf:
        names = [
            n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        ]
        if not names:
            raise Error(f"{path} has no .dist-info/METADATA: not a wheel")
        meta = HeaderParser().parsestr(zf.read(names[0]).decode("utf-8"))
    return [Requirement(r) for r in meta.get_all("Requires-Dist") or []]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_pip(args, capture=True):
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, capture_output=capture, text=True)


def pip_error(proc):
    lines = [l.strip() for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
    errors = [l for l in lines if "ERROR" in l]
    return (errors or lines or ["no output"])[-1]


class Resolver:
    """The closure of a set of requirements as wheels for one target, downloaded into dest."""

    def __init__(self, dest, version, platform):
        self.dest = Path(dest)
        self.version = version
        self.platforms, arch = expand_platform(platform)
        self.platform = platform
        self.tags = target_tags(version, self.platforms)
        self.env = marker_environment(version, arch)
        self.pip_target = [
            "--only-binary=:all:",
            "--implementation",
            "cp",
            "--python-version",
            f"{version[0]}.{version[1]}",
        ]
        for p in self.platforms:
            self.pip_target += ["--platform", p]

    def describe(self):
        return f"CPython {self.version[0]}.{self.version[1]} on {self.platform}"

    # -- finding the wheel of a requirement

    def pick(self, name, spec):
        """The newest wheel in dest for name that satisfies spec and suits the target."""
        best = None
        for prerelease in (False, True):
            for path in self.dest.glob("*.whl"):
                try:
                    wname, version, _, _ = parse_wheel_filename(path.name)
                except Exception:
                    continue
                if wname != name or not spec.contains(version, prereleases=prerelease):
                    continue
                if not wheel_tags(path.name) & self.tags:
                    continue
                if best is None or version > best[0]:
                    best = (version, path)
            if best:
                return best[1]
        return None

    def download(self, reqs):
        return run_pip(
            [
                "download",
                "--no-deps",
                "--progress-bar",
                "off",
                "-d",
                str(self.dest),
                *self.pip_target,
                *reqs,
            ]
        )

    def build_from_source(self, name, req):
        """pip wheel --no-deps of a package published only as a source distribution."""
        with tempfile.TemporaryDirectory() as tmp:
            proc = run_pip(
                ["wheel", "--no-deps", "--no-binary", name, "--progress-bar", "off", "-w", tmp, req]
            )
            built = list(Path(tmp).glob("*.whl"))
            if proc.returncode != 0 or len(built) != 1:
                raise Error(
                    f"{req} has no wheel for {self.describe()} and building it from "
                    f"source failed: {pip_error(proc)}"
                )
            wheel = built[0]
            if not wheel_tags(wheel.name) & self.tags:
                raise Error(
                    f"{req} has no wheel for {self.describe()}, and its source builds "
                    f"{wheel.name}, which does not suit that target"
                )
            shutil.copy2(wheel, self.dest / wheel.name)
        say(f"built {wheel.name} from its source distribution")

    def fetch(self, wanted):
        """Downloads (or builds) a wheel for every {name: requirement string}."""
        if "torch" in wanted:  # never resolved here: only an exact pin, through --with-torch
            raise Error("torch reached the resolver unpinned; refusing to download it")
        missing = {n: r for n, r in wanted.items() if self.pick(n, self.specs[n]) is None}
        if not missing:
            return
        if self.download(sorted(missing.values())).returncode == 0:
            return
        for name, req in sorted(missing.items()):  # one of them has no wheel: find which
            if self.download([req]).returncode != 0:
                self.build_from_source(name, req)

    # -- the closure

    def resolve(self, roots, left_out, preset=()):
        """roots: Requirements; left_out: names never followed; preset: wheels already chosen.

        Returns {name: (path, set of names it requires)}. A later requirement that the chosen
        version of a package does not meet restarts the walk with both constraints."""
        extra_specs = {}
        for _ in range(10):
            try:
                return self._walk(roots, left_out, preset, extra_specs)
            except _Conflict as c:
                extra_specs[c.name] = c.spec
        raise Error("the requirements do not settle on one version per package")

    def _walk(self, roots, left_out, preset, extra_specs):
        self.specs = {n: SpecifierSet(str(s)) for n, s in extra_specs.items()}
        self.extras = {}
        self.display = {}
        chosen, pending = {}, {}

        def add(req, extras_of_parent):
            if req.marker is not None and not any(
                req.marker.evaluate(dict(self.env, extra=e)) for e in extras_of_parent
            ):
                return None
            name = canonicalize_name(req.name)
            if name in left_out:
                return None
            self.specs[name] = self.specs.get(name, SpecifierSet()) & req.specifier
            self.display.setdefault(name, req.name)
            new_extras = set(req.extras) - self.extras.get(name, set())
            self.extras.setdefault(name, set()).update(req.extras)
            if name in chosen:
                version = parse_wheel_filename(chosen[name][0].name)[1]
                if not self.specs[name].contains(version, prereleases=True):
                    raise _Conflict(name, self.specs[name])
                if new_extras:
                    visit(name, chosen[name][0])
            else:
                pending[name] = f"{self.display[name]}{self.specs[name]}"
            return name

        def visit(name, path):
            deps = chosen.setdefault(name, (path, set()))[1]
            extras = {""} | self.extras.get(name, set())
            for req in wheel_requirements(path):
                dep = add(req, extras)
                if dep:
                    deps.add(dep)

        for path in preset:
            visit(parse_wheel_filename(path.name)[0], path)
        root_deps = {d for d in (add(r, {""}) for r in roots) if d}
        while pending:
            wanted = {n: r for n, r in pending.items() if n not in chosen}
            pending.clear()
            if not wanted:
                break
            say(f"resolving {', '.join(sorted(wanted.values()))}")
            self.fetch(wanted)
            for name in sorted(wanted):
                if name in chosen:
                    continue
                path = self.pick(name, self.specs[name])
                if path is None and name in pending:
                    continue  # narrowed by a package of this round: fetched again next round
                if path is None:
                    raise Error(f"no wheel of {wanted[name]} for {self.describe()} in {self.dest}")
                visit(name, path)
        chosen[""] = (None, root_deps)
        return chosen


class _Conflict(Exception):
    def __init__(self, name, spec):
        super().__init__(name)
        self.name, self.spec = name, spec


def reachable(graph, start, blocked=()):
    seen, todo = set(), [start]
    while todo:
        for dep in graph[todo.pop()][1]:
            if dep not in seen and dep not in blocked:
                seen.add(dep)
                todo.append(dep)
    return seen


# ---------------------------------------------------------------- build


def build_plugin_wheel(dest):
    """pip wheel --no-deps of this repository, from a copy (no build/ or egg-info in the tree)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md"):
            if (REPO / name).is_file():
                shutil.copy2(REPO / name, src / name)
        shutil.copytree(
            REPO / "fairseq_noising",
            src / "fairseq_noising",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        out = Path(tmp) / "out"
        proc = run_pip(["wheel", "--no-deps", "--progress-bar", "off", "-w", str(out), str(src)])
        built = list(out.glob("*.whl")) if out.is_dir() else []
        if proc.returncode != 0 or len(built) != 1:
            raise Error(f"building the fairseq-noising wheel failed: {pip_error(proc)}")
        shutil.copy2(built[0], Path(dest) / built[0].name)
        return Path(dest) / built[0].name


def torch_request(spec, resolver):
    """--with-torch checked: a torch wheel file that suits the target, or an exact pin."""
    if spec.endswith(".whl"):
        path = Path(spec)
        if not path.is_file():
            raise Error(f"--with-torch {spec}: no such file")
        try:
            name = parse_wheel_filename(path.name)[0]
        except Exception:
            name = None
        if name != "torch":
            raise Error(f"--with-torch {spec}: not a torch wheel")
        if not wheel_tags(path.name) & resolver.tags:
            raise Error(f"--with-torch {spec} does not suit {resolver.describe()}")
        return path
    try:
        req = Requirement(spec)
    except Exception:
        req = None
    pins = [s for s in (req.specifier if req else []) if s.operator in ("==", "===")]
    if req is None or canonicalize_name(req.name) != "torch" or not pins or "*" in spec:
        raise Error(
            f"--with-torch needs an exact pin such as torch==2.13.0 or a torch wheel "
            f"file, got {spec!r} (an unpinned torch is a multi-GB CUDA download)"
        )
    return req


def fetch_torch(resolver, request, dest):
    """The torch wheel of --with-torch: an exact pin (downloaded) or a wheel file (copied)."""
    if isinstance(request, Path):
        if not (dest / request.name).exists():
            shutil.copy2(request, dest / request.name)
        return dest / request.name
    req, spec = request, str(request)
    resolver.specs = {"torch": req.specifier}
    path = resolver.pick("torch", req.specifier)
    if path is None:
        proc = resolver.download([spec])
        path = resolver.pick("torch", req.specifier)
        if proc.returncode != 0 or path is None:
            raise Error(f"no {spec} wheel for {resolver.describe()}: {pip_error(proc)}")
    return path


def build(args):
    version = parse_python_version(args.python_version)
    dest = Path(args.dir).resolve()
    resolver = Resolver(dest, version, args.platform)
    torch_req = torch_request(args.with_torch, resolver) if args.with_torch else None
    dest.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in dest.glob("*.whl")}
    say(f"building a wheelhouse for {resolver.describe()} in {dest}")

    plugin = build_plugin_wheel(dest)
    say(f"built {plugin.name}")
    preset = [plugin]
    left_out = set(LEFT_OUT)
    if args.with_torch:
        torch = fetch_torch(resolver, torch_req, dest)
        say(f"torch: {torch.name}")
        preset.insert(0, torch)  # chosen before anything asks for torch
        left_out.discard("torch")
    graph = resolver.resolve([], left_out, preset)

    plugin_name = parse_wheel_filename(plugin.name)[0]
    graph[""] = (None, {plugin_name} | ({"torch"} if args.with_torch else set()))
    needed = reachable(graph, "") - {"torch"}
    by_plugin = reachable(graph, plugin_name, blocked={"torch"}) | {plugin_name}
    wheels = []
    for name in sorted(needed | ({"torch"} if args.with_torch else set())):
        path = graph[name][0]
        wheel_version = parse_wheel_filename(path.name)[1]
        role = "torch" if name == "torch" else ("plugin" if name in by_plugin else "torch-only")
        wheels.append(
            {
                "name": name,
                "version": str(wheel_version),
                "file": path.name,
                "sha256": sha256(path),
                "role": role,
            }
        )
    manifest = {
        "format": FORMAT,
        "python_version": f"{version[0]}.{version[1]}",
        "implementation": "cp",
        "platform": args.platform,
        "platforms": resolver.platforms,
        "left_out": {k: v for k, v in LEFT_OUT.items() if k in left_out},
        "wheels": wheels,
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    listed = {w["file"] for w in wheels}
    for path in dest.glob("*.whl"):  # what this run fetched and then did not need
        if path.name not in listed and path.name not in before:
            path.unlink()
    others = sorted(p.name for p in dest.glob("*.whl") if p.name not in listed)
    size = sum((dest / f).stat().st_size for f in listed) / 2**20
    say(
        f"{len(wheels)} wheels ({size:.0f} MiB) for {resolver.describe()} in {dest}, "
        f"listed in {MANIFEST}; torch {'included' if args.with_torch else 'not included'}"
    )
    if others:
        say(f"note: {len(others)} other wheels in {dest} are not needed: {', '.join(others)}")
    say(f"install offline: bash recipes/setup.sh --from-wheelhouse {dest} [--python PY]")


# ---------------------------------------------------------------- install

PROBE = r"""
import json, sys
try:
    from importlib.metadata import version
    torch = version("torch")
except Exception:
    torch = None
try:
    try:
        from packaging.tags import sys_tags
    except ImportError:
        from pip._vendor.packaging.tags import sys_tags
    tags = [str(t) for t in sys_tags()]
except Exception:
    tags = None
try:
    import pip
    has_pip = True
except ImportError:
    has_pip = False
print(json.dumps({"version": "%d.%d" % sys.version_info[:2], "torch": torch, "tags": tags,
                  "pip": has_pip, "executable": sys.executable}))
"""


def probe(python):
    proc = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True)
    if proc.returncode != 0:
        raise Error(f"{python} does not run: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def read_manifest(folder):
    if not folder.is_dir():
        raise Error(f"wheelhouse folder {folder} does not exist")
    path = folder / MANIFEST
    if not path.is_file():
        raise Error(
            f"{folder} has no {MANIFEST}: not a wheelhouse "
            "(make one with bash recipes/setup.sh --build-wheelhouse DIR)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        assert manifest["format"] == FORMAT and manifest["wheels"]
        manifest["python_version"], manifest["platform"]
    except Exception:
        raise Error(f"{path} is not a wheelhouse manifest of format {FORMAT}")
    return manifest


def install(args):
    folder = Path(args.dir).resolve()
    manifest = read_manifest(folder)
    want = manifest["python_version"]

    # the target interpreter: --python, an existing --venv, or a new --venv from this Python
    create = None
    if args.python:
        python = Path(args.python)
        if not (python.is_file() and os.access(python, os.X_OK)):
            raise Error(f"--python {args.python}: no such executable")
    else:
        venv = Path(args.venv).resolve()
        python = venv / "bin" / "python"
        if not python.exists():
            create, python = venv, Path(sys.executable)
    info = probe(python)
    if info["version"] != want:
        raise Error(
            f"wheelhouse {folder} was built for Python {want}, but {python} is "
            f"Python {info['version']}"
        )
    torch_here = None if create else info["torch"]

    wheels = manifest["wheels"]
    for w in wheels:
        if not (folder / w["file"]).is_file():
            raise Error(
                f"wheelhouse {folder} lacks the wheel of {w['name']} {w['version']} "
                f"({w['file']}), which is needed"
            )
    torch_wheels = [w for w in wheels if w["role"] == "torch"]
    if torch_here:
        todo = [w for w in wheels if w["role"] == "plugin"]
    elif torch_wheels:
        todo = list(wheels)
    else:
        where = f"the new environment {create}" if create else str(python)
        raise Error(
            f"{where} has no torch and wheelhouse {folder} has none: install your torch "
            "build there first, or build the wheelhouse with --with-torch torch==VERSION"
        )
    if not create and not info["pip"]:
        raise Error(f"{python} has no pip (python -m ensurepip installs it offline)")
    tags = set(info["tags"] or [])
    for w in todo:
        if tags and not wheel_tags(w["file"]) & tags:
            raise Error(
                f"wheel {w['file']} of {w['name']} does not suit {python} (wheelhouse "
                f"built for {manifest['platform']})"
            )
        if sha256(folder / w["file"]) != w["sha256"]:
            raise Error(
                f"wheel {w['file']} of {w['name']} in {folder} is damaged "
                "(its sha256 differs from the manifest's)"
            )

    if create:
        say(f"creating {create} with {python}")
        subprocess.run([str(python), "-m", "venv", str(create)], check=True)
        python = create / "bin" / "python"
    if torch_here:
        say(f"keeping torch {torch_here} of {python}")
    say(f"installing {len(todo)} wheels from {folder} into {python}, no index")
    pins = [f"{w['name']}=={w['version']}" for w in todo]
    cmd = [
        str(python),
        "-m",
        "pip",
        "--disable-pip-version-check",
        "install",
        "--no-index",
        "--find-links",
        str(folder),
        "--no-deps",
        *pins,
    ]
    if subprocess.run(cmd).returncode != 0:
        raise Error(f"pip install from {folder} failed (its output is above)")

    # every requirement met, except those the wheelhouse leaves out on purpose
    proc = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "check"],
        capture_output=True,
        text=True,
    )
    left_out = set(manifest.get("left_out", {})) - {"torch"}
    problems = [
        l
        for l in proc.stdout.splitlines()
        if l.strip() and not any(re.search(rf"requires {n}\b", l) for n in left_out)
    ]
    for line in problems:
        say(f"warning: {line}")
    check = subprocess.run(
        [
            str(python),
            "-c",
            "import os, torch, fairseq, fairseq_noising; "
            "print(f'fairseq-noising ready: torch {torch.__version__}, fairseq {fairseq.__version__},"
            " --user-dir {os.path.dirname(fairseq_noising.__file__)}')",
        ],
        capture_output=True,
        text=True,
    )
    if check.returncode != 0:
        raise Error(
            f"the installed plugin does not import: "
            f"{(check.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    print(check.stdout.strip())


def main(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download and build the wheels into DIR (needs an index)")
    b.add_argument("dir")
    b.add_argument(
        "--python-version",
        default="%d.%d" % sys.version_info[:2],
        help="target Python, e.g. 3.12 (default: this interpreter's)",
    )
    b.add_argument(
        "--platform",
        default=DEFAULT_PLATFORM,
        help=f"target manylinux platform (default {DEFAULT_PLATFORM}: glibc >= 2.28, "
        "x86_64; older manylinux wheels are accepted too)",
    )
    b.add_argument(
        "--with-torch",
        metavar="SPEC",
        help="also add torch: an exact pin (torch==2.13.0) or a torch wheel file",
    )
    i = sub.add_parser("install", help="install from DIR with no index")
    i.add_argument("dir")
    i.add_argument("--python", help="the interpreter of the target environment (wins over --venv)")
    i.add_argument(
        "--venv",
        default=str(REPO / ".venv"),
        help="a virtual environment, created with this Python if missing "
        "(default: the repository's .venv)",
    )
    args = parser.parse_args(argv)
    try:
        (build if args.command == "build" else install)(args)
    except Error as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
