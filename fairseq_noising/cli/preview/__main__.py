"""``python -m fairseq_noising.cli.preview``: the console script."""

from . import cli_main

cli_main()
