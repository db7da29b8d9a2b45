"""Text files as lists of lines, written through a temporary name (a half-written file is never
taken for a finished one)."""

import gzip
import os

SPLITS = ("train", "valid", "test")


def write_lines(path, lines):
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    os.replace(tmp, path)


def read_lines(path):
    """The lines of a file (split on "\\n" only; a missing final newline is tolerated); a path
    that does not exist is read from ``path.gz`` when that exists."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rt", encoding="utf-8") as f:
            text = f.read()
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def strip_trailing_empty(lines):
    while lines and not lines[-1].strip():
        lines.pop()
    return lines
