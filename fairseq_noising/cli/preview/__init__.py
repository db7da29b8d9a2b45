"""``fairseq-noise-preview``: shows the noise that training would apply, without training.

Usage, options and the JSON Lines format are in docs/preview.md.
"""

import logging
import os
import sys
import tempfile
from typing import Dict

from ...errors import NoisingError, exit_on_error
from .collect import Preview
from .options import get_preview_parser, load_task, parse_args
from .report import print_summary

__all__ = ["cli_main", "get_preview_parser", "load_task", "main", "parse_args"]


def main(argv=None, stdout=None) -> Dict:
    """Runs the preview; returns the per-side summary (docs/preview.md) for programmatic use."""
    stdout = stdout or sys.stdout
    args = parse_args(argv)
    task, dataset = load_task(args)
    preview = Preview(args, task, dataset)
    if args.output is None:
        preview.run()
    else:
        _run_to_file(preview, args.output, args.force)
    print_summary(preview, stdout)
    if args.output is not None:
        print(f"wrote {preview.examples:,} examples to {args.output}", file=stdout)
    return preview.summary()


def _run_to_file(preview, path, force):
    """Writes the JSON Lines to a temporary file that replaces ``path`` once complete."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".preview.", suffix=".jsonl.tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            preview.run(out)
        if not force and os.path.lexists(path):
            raise NoisingError(f"output file {path} already exists; pass --force to overwrite it")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; give it normal rights
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def cli_main():
    # fairseq's imports switch the root logger to INFO; the preview prints its own summary
    logging.getLogger().setLevel(logging.WARNING)
    try:
        exit_on_error(main)  # a NoisingError: its one line on stderr, exit status 1
    except BrokenPipeError:  # e.g. piped into head
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
