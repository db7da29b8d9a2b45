#!/usr/bin/env python3
"""The results pages of the reproduction recipes, gamma_0 chosen on validation perplexity, and the
status of the runs of a working folder.

    python recipes/report.py check [--prog NAME] NAME=VALUE ...
    python recipes/report.py best [--prog NAME] [--dry-run] RUN ...
    python recipes/report.py write [--prog NAME] [--dry-run] [--partial] TABLE --out PAGE \\
        --device DEVICE --data PATH --settings NAME=VALUE ... --prepared DIR ... --runs RUN ... \\
        [--analysis DIR]
    python recipes/report.py status WORK

``check`` stops with one line naming the first recipe setting (SIZE, SCHEMES, ROWS, GAMMAS,
``GAMMAS_<scheme>`` from the environment, MAX_EPOCH, JOBS, TIME_BUDGET, ...) whose value is not
what the recipe expects. ``best`` prints the trained run folder with the lowest validation
perplexity (the first of equals; a single one without looking; nothing when every run failed); in
a dry run, before the runs are evaluated, the first one's name with ``-gBEST`` for its gamma_0.
``write`` writes the results page PAGE of TABLE (one of :data:`paper_tables.TABLES`:
``ptb-small``, ``ptb-medium``, ``ptb-large``, ``text8``, ``iwslt15``, ``multi30k``;
``recipes/results_page.py``): our figures beside the paper's, every run and how its training
ended, the training logs in ``PAGE-logs/`` (for translation also the chosen runs' detokenized test
output) and, for a language model trained with ``none`` and ``kn``, Figure 1 of the paper
(``PAGE-curves.png``, numbers in ``PAGE-curves.json``); with ``--analysis DIR``, Figure 3 and
Table 6 from the recipe's ``fairseq-noise-analyze kl`` and ``unseen`` outputs in DIR
(``recipes/analysis_section.py``, copied into ``PAGE-analysis/``); then every command that made
them. ``--partial``: runs may still be training (``recipes/rows.py`` rewrites the page so while
they run); without it, a page whose runs include failed ones is written and then the command
exits 1 naming them. ``status`` prints one line per training of WORK (``recipes/row_status.py``).

A run folder (RUN) is a save dir of a ``train`` step (``recipes/run_folders.py``: its markers);
``train.log`` is its output. The evaluation outputs are written into it:

- ``valid.eval.log``: fairseq-eval-lm (``Perplexity: X``) or fairseq-validate (``| ppl X``);
- language models, chosen run: ``test.eval.log`` (fairseq-eval-lm on test);
- translation, chosen run: ``test.gen`` (fairseq-generate), ``test.bleu`` (``BLEU X`` and
  ``tok BLEU Y``, from ``prepare_translation.py score``), ``test.detok``.

Row labels come from the scheme registry (:data:`fairseq_noising.schemes.REGISTRY`); a translation
row ``kn:source`` is the scheme's label with ", source only".
"""

import argparse
import logging
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [HERE, REPO]
logging.disable(logging.INFO)  # importing the plugin may import fairseq, which logs at INFO

import results_page  # noqa: E402
from paper_tables import TABLES  # noqa: E402
from recipe_settings import parse_settings, settings_error, with_scheme_grids  # noqa: E402
from row_status import work_status  # noqa: E402
from run_folders import best_run, read_run  # noqa: E402
from steps import fail, shown  # noqa: E402

# ------------------------------------------------------------------ command line


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="recipes/report.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="one line naming a bad setting")
    p.add_argument("--prog", default="report.py")
    p.add_argument("settings", nargs="*", metavar="NAME=VALUE")
    p = sub.add_parser("best", help="the run with the lowest validation perplexity")
    p.add_argument("--prog", default="report.py")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("runs", nargs="+", metavar="RUN")
    p = sub.add_parser("write", help="the results page")
    p.add_argument("--prog", default="report.py")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("table", choices=sorted(TABLES))
    p.add_argument("--out", required=True, metavar="PAGE")
    p.add_argument("--device", required=True)
    p.add_argument("--data", required=True, help="where the data came from (for the notes)")
    p.add_argument("--settings", nargs="*", default=[], metavar="NAME=VALUE")
    p.add_argument("--prepared", nargs="*", default=[], metavar="DIR")
    p.add_argument("--runs", nargs="+", required=True, metavar="RUN")
    p.add_argument("--analysis", metavar="DIR", help="the folder of the kl and unseen analyses")
    p.add_argument(
        "--partial", action="store_true", help="runs may still train (a page written meanwhile)"
    )
    p = sub.add_parser("status", help="one line per training of a working folder")
    p.add_argument("work", metavar="WORK")
    args = parser.parse_args(argv)
    if args.command == "status":
        print("\n".join(work_status(args.work)))
        return 0
    if args.command == "check":
        error = settings_error(with_scheme_grids(parse_settings(args.settings)))
        if error:
            fail(args.prog, error)
        return 0
    if args.command == "best":
        print(best_run(args.runs, args.dry_run, args.prog))
        return 0
    if args.dry_run:
        print(f"(dry run: nothing was run; a real run writes {shown(args.out)})")
        return 0
    table = TABLES[args.table]
    runs = [read_run(path, args.prog, args.partial) for path in args.runs]
    command = [sys.executable, "recipes/report.py"] + list(
        argv if argv is not None else sys.argv[1:]
    )
    command = [a for a in command if a != "--partial"]
    text, path = results_page.page(args, table, runs, command)
    if args.partial:
        return 0
    print()
    print(text)
    print(f"{args.prog}: wrote {shown(path)}")
    failed = [f"{run.name} ({run.failure})" for run in runs if run.state == "failed"]
    if failed:
        fail(args.prog, f"{len(failed)} of {len(runs)} trainings failed: " + "; ".join(failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
