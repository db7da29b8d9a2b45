"""``wheelhouse.py build``: the plugin's wheels and all they need but torch, for one Python and
manylinux platform, as ``pip download`` resolves them (docs/wheelhouse.md)."""

import json
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from wheelhouse_common import (
    FORMAT,
    LEFT_OUT,
    MANIFEST,
    REPO,
    Error,
    canonical,
    last_error,
    name_version,
    pip,
    say,
    sha256,
)

DEFAULT_PLATFORM = "manylinux_2_28_x86_64"
# the version the placeholders claim (else --with-torch's): it must meet what the packages and
# pip's constraints ask of torch and torchaudio
PLACEHOLDER_VERSION = "2.13.0"
LEGACY = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}  # glibc 2.x they stand for


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
