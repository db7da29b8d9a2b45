"""``python -m fairseq_noising.cli.analyze``: the console script."""

from . import cli_main

cli_main()
