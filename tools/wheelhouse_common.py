"""What building and installing a wheelhouse share (tools/wheelhouse.py): its manifest, pip, and
wheels' names and hashes."""

import hashlib
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANIFEST = "wheelhouse.json"
FORMAT = 1
LEFT_OUT = {
    "torch": "the target's own torch build is kept (--with-torch adds one)",
    "torchaudio": "fairseq imports it only in its speech tasks, and it pins one torch version",
}


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
