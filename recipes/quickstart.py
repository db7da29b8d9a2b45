"""The quick start's report: the table of valid/test perplexities and Figure 1.

    python recipes/quickstart.py report [--dry-run] --work DIR --out DIR NAME [NAME ...]

``report`` reads each run's evaluation outputs (``valid.eval.log``, ``test.eval.log``) and training
log under ``DIR/NAME/`` and writes the table (valid/test perplexity per run and the difference to
the first) and Figure 1 of the paper, with the training and evaluation commands (recorded by
``recipes/steps.py``). The runs are trained and evaluated side by side by ``recipes/rows.py``.
"""

import argparse
import logging
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
logging.disable(logging.INFO)  # importing the plugin imports fairseq, which logs at INFO

from run_folders import perplexity  # noqa: E402
from steps import read_marker, shown_line  # noqa: E402

from fairseq_noising.analysis import logs  # noqa: E402


def fail(message: str) -> None:
    sys.exit(f"quickstart.sh: {message}")


def report(work: str, out: str, names, title: str):
    rows, curves = [], {}
    for name in names:
        run_dir = os.path.join(work, name)
        valid = perplexity(os.path.join(run_dir, "valid.eval.log"))
        test = perplexity(os.path.join(run_dir, "test.eval.log"))
        if valid is None or test is None:
            fail(f"no perplexity in {run_dir}/valid.eval.log or test.eval.log: did evaluation run?")
        run = logs.read_log(os.path.join(run_dir, "train.log"))
        rows.append((name, run.noise_gamma or 0.0, len(run.valid_ppl), valid, test))
        curves[f"{name}" + (f" (gamma_0 {run.noise_gamma:g})" if run.noise_gamma else "")] = (
            run.train_ppl,
            run.valid_ppl,
        )
    os.makedirs(out, exist_ok=True)
    from fairseq_noising.analysis import plots  # matplotlib: only when drawing

    figure = plots.curves(curves, os.path.join(out, "curves.png"))
    base_valid, base_test = rows[0][3], rows[0][4]
    lines = [
        f"# {title}",
        "",
        "| scheme | gamma_0 | epochs | valid ppl | test ppl | valid diff | test diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, gamma, epochs, valid, test in rows:
        lines.append(
            f"| {name} | {gamma:g} | {epochs} | {valid:.2f} | {test:.2f} | "
            f"{valid - base_valid:+.2f} | {test - base_test:+.2f} |"
        )
    lines += [
        "",
        "Differences are to the first row. Figure 1 of the paper (training and "
        "validation perplexity per epoch):",
        "",
        "![curves](curves.png)",
        "",
        "Training commands:",
        "",
    ]
    for name in names:
        line = read_marker(os.path.join(work, name, ".command"))
        if line is None:
            fail(f"{work}/{name}/.command is missing: did training run?")
        lines.append("    " + shown_line(line))
    lines += ["", "Evaluation of each run's checkpoint_best.pt on valid and test:", ""]
    for name in names:
        for split in ("valid", "test"):
            line = read_marker(os.path.join(work, name, f"{split}.eval.log.done"))
            if line is None:
                fail(f"{work}/{name}/{split}.eval.log.done is missing: did evaluation run?")
            lines.append("    " + shown_line(line))
    lines.append("")
    table = "\n".join(lines)
    path = os.path.join(out, "results.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(table)
    return table, path, figure


def main(argv=None):
    parser = argparse.ArgumentParser(prog="recipes/quickstart.py")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("report")
    p.add_argument("--dry-run", action="store_true", help="say what a real run writes")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--title", default="Quick start")
    p.add_argument("names", nargs="+")
    args = parser.parse_args(argv)
    if args.dry_run:
        print(f"(dry run: nothing was run; a real run writes {args.out}/results.md and curves.png)")
        return 0
    table, path, figure = report(args.work, args.out, args.names, args.title)
    print(table)
    print(f"table: {path}\nfigure: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
