"""``fairseq-noise-analyze``: the analyses of Xie et al. (2017), Section 5, for this plugin's runs.

One module per subcommand (kl, unseen, mc-eval, sweep, curves, pseudocounts); usage, options and
examples are in docs/analysis.md, the mathematics in :mod:`fairseq_noising.analysis`.
"""

import argparse
import logging
import shlex
import sys
import time
from typing import Dict

logging.getLogger("matplotlib").setLevel(logging.WARNING)  # its import-time debug chatter

from ...errors import NoisingError, exit_on_error  # noqa: E402
from . import curves, kl, mc_eval, pseudocounts, sweep, unseen  # noqa: E402
from .common import write_json  # noqa: E402

SUBCOMMANDS = (kl, unseen, mc_eval, sweep, curves, pseudocounts)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors (its subcommands' too) are one ``NoisingError`` line."""

    def error(self, message):
        raise NoisingError(f"{message} (see {self.prog} --help)")


def get_parser():
    parser = ArgumentParser(
        prog="fairseq-noise-analyze",
        description="Analyses of noised language models (Xie et al., 2017, Section 5).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv=None) -> Dict:
    """Runs one subcommand; returns its numbers (what ``--json`` writes), with the subcommand,
    the command line as run and its wall-clock seconds."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = get_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "takes_task_options", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.task_argv = rest
    start = time.monotonic()
    result = args.run(args)
    result["command"] = args.command
    result["command_line"] = shlex.join([parser.prog, *argv])
    result["seconds"] = round(time.monotonic() - start, 1)
    write_json(args.json, result)
    return result


def cli_main():
    logging.basicConfig(
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        level=logging.INFO,
        stream=sys.stderr,
        force=True,
    )
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    exit_on_error(main)  # a NoisingError: its one line on stderr, exit status 1
