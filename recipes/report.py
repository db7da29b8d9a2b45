#!/usr/bin/env python3
"""The results pages of the reproduction recipes, and gamma_0 chosen on validation perplexity.

    python recipes/report.py check [--prog NAME] NAME=VALUE ...
    python recipes/report.py best [--prog NAME] [--dry-run] RUN ...
    python recipes/report.py write [--prog NAME] [--dry-run] TABLE --out PAGE --device DEVICE \\
        --data PATH --settings NAME=VALUE ... --prepared DIR ... --runs RUN ... [--analysis DIR]

``check`` stops with one line naming the first recipe setting (SIZE, SCHEMES, ROWS, GAMMAS,
``GAMMAS_<scheme>`` from the environment, MAX_EPOCH, ...) whose value is not what the recipe
expects. ``best`` prints the run folder with the lowest validation perplexity (the first of equals;
a single run without looking); in a dry run, before the runs are evaluated, the first one's name
with ``-gBEST`` for its gamma_0.
``write`` writes the results page PAGE of TABLE (one of :data:`TABLES`: ``ptb-small``,
``ptb-medium``, ``ptb-large``, ``text8``, ``iwslt15``, ``multi30k``): our figures beside the paper's,
the validation perplexity of every run, the training logs in ``PAGE-logs/`` (for translation also
the chosen runs' detokenized test output) and, for a language model trained with ``none`` and
``kn``, Figure 1 of the paper (``PAGE-curves.png``, numbers in ``PAGE-curves.json``); with
``--analysis DIR``, Figure 3 and Table 6 from the recipe's ``fairseq-noise-analyze kl`` and
``unseen`` outputs in DIR (``recipes/analysis_section.py``, copied into ``PAGE-analysis/``); then
every command that made them, as recorded by ``recipes/steps.py``.

A run folder (RUN) is a save dir of ``recipes/steps.py train``: ``.done`` holds its training command
(the scheme, gamma_0 and side are read from it), ``train.log`` its output. The recipe writes each
evaluation output into it with ``recipes/steps.py evaluate``:

- ``valid.eval.log``: fairseq-eval-lm (``Perplexity: X``) or fairseq-validate (``| ppl X``);
- language models, chosen run: ``test.eval.log`` (fairseq-eval-lm on test);
- translation, chosen run: ``test.gen`` (fairseq-generate), ``test.bleu`` (``BLEU X`` and
  ``tok BLEU Y``, from ``prepare_translation.py score``), ``test.detok``.

Row labels come from the scheme registry (:data:`fairseq_noising.schemes.REGISTRY`); a translation
row ``kn:source`` is the scheme's label with ", source only".
"""

import argparse
import datetime
import json
import logging
import os
import shutil
import string
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [HERE, REPO]
logging.disable(logging.INFO)  # importing the plugin may import fairseq, which logs at INFO

import analysis_section  # noqa: E402
from page_format import NONE, fmt, md_table, paper_value  # noqa: E402
from paper_tables import PROTOCOL, TABLES, Table, row_label  # noqa: E402
from recipe_settings import (  # noqa: E402
    parse_settings,
    settings_error,
    settings_line,
    with_scheme_grids,
)
from run_folders import (  # noqa: E402
    Run,
    best_run,
    bleu_scores,
    bleu_signatures,
    choose,
    perplexity,
    read_run,
    read_text,
)
from steps import fail, read_marker, shown, shown_command, shown_line  # noqa: E402

from fairseq_noising.analysis import logs  # noqa: E402

# ------------------------------------------------------------------ the page


class _Blank(dict):
    def __missing__(self, key):
        return "?"


def _duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return NONE
    if seconds < 60:
        return f"{seconds:.0f} s"
    hours, minutes = divmod(int(round(seconds / 60.0)), 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def _marker_command(path: str, prog: str) -> str:
    line = read_marker(path)
    if line is None:
        fail(prog, f"{shown(path)} is missing: did that step run?")
    return "    " + shown_line(line)


@dataclass
class Row:
    """One row of the main table: its runs, their validation perplexities, the chosen run."""

    key: str
    runs: List[Run]
    valid: Dict[str, float]
    chosen: Run


def _rows(runs: Sequence[Run], prog: str) -> List[Row]:
    grouped: Dict[str, List[Run]] = {}
    for run in runs:
        grouped.setdefault(run.row, []).append(run)
    rows = []
    for key, members in grouped.items():
        valid = {}
        for run in members:
            ppl = perplexity(run.file("valid.eval.log"))
            if ppl is None:
                fail(prog, f"no validation perplexity in {shown(run.file('valid.eval.log'))}")
            valid[run.path] = ppl
        chosen_path = choose([(run.path, valid[run.path]) for run in members])
        rows.append(Row(key, members, valid, next(r for r in members if r.path == chosen_path)))
    return rows


def _copy_logs(rows: Sequence[Row], logs_dir: str, kind: str) -> None:
    shutil.rmtree(logs_dir, ignore_errors=True)
    os.makedirs(logs_dir)
    for row in rows:
        for run in row.runs:
            shutil.copyfile(run.file("train.log"), os.path.join(logs_dir, f"{run.name}.train.log"))
        detok = row.chosen.file("test.detok")
        if kind == "translation" and os.path.isfile(detok):
            shutil.copyfile(detok, os.path.join(logs_dir, f"{row.chosen.name}.test.detok"))


def figure_1(rows: Sequence[Row], logs_dir: str, png: str) -> Optional[List[str]]:
    """Figure 1 (train and valid perplexity per epoch, none against the chosen kn run) from the
    copied logs: writes the PNG and its numbers (``.json``); returns the page's lines, or None
    when the page has no none or no kn row."""
    by_key = {row.key: row for row in rows}
    if "none" not in by_key or "kn" not in by_key:
        return None
    from fairseq_noising.analysis import plots

    curves = {}
    for label, run in (("none", by_key["none"].chosen), (None, by_key["kn"].chosen)):
        label = label or f"kn gamma_0 {run.gamma}"
        curves[label] = logs.read_log(os.path.join(logs_dir, f"{run.name}.train.log"))
    plots.curves({k: (r.train_ppl, r.valid_ppl) for k, r in curves.items()}, png)
    numbers = {
        label: {
            "path": shown(r.path),
            "scheme": r.noise_scheme,
            "gamma": r.noise_gamma,
            "train_ppl": r.train_ppl,
            "valid_ppl": r.valid_ppl,
            "best_valid_ppl": r.best_valid_ppl,
        }
        for label, r in curves.items()
    }
    with open(os.path.splitext(png)[0] + ".json", "w", encoding="utf-8") as f:
        json.dump({"runs": numbers}, f, indent=1)
    table = []
    for label, r in curves.items():
        for epoch in sorted(set(r.train_ppl) | set(r.valid_ppl)):
            table.append([label, epoch, fmt(r.train_ppl.get(epoch)), fmt(r.valid_ppl.get(epoch))])
    return [
        "Figure 1 of the paper for this run: training and validation perplexity per epoch, unnoised",
        "versus bigram Kneser-Ney noising (the kn training perplexity is measured on noised data).",
        "",
        f"![training and validation curves]({os.path.basename(png)})",
        "",
        *md_table(["run", "epoch", "train ppl", "valid ppl"], table),
        "",
    ]


def _notes(table: Table, settings: Dict[str, str], data: str, prepared: Sequence[str]) -> str:
    stats = NONE
    for directory in prepared:
        text = read_text(os.path.join(directory, "stats.json"))
        if text:
            stats = json.dumps(json.loads(text), separators=(",", ":"))
    values = _Blank(settings, data=shown(data), stats=stats)
    notes = string.Formatter().vformat(table.notes, (), values)
    if table.kind == "translation":
        notes += " Vocabulary: " + _vocabulary(settings, prepared) + "."
    return notes


def _vocabulary(settings: Dict[str, str], prepared: Sequence[str]) -> str:
    if settings.get("SPM") == "1":
        kind = "joint" if settings.get("SPM_JOINT") == "1" else "one model per language"
        return f"sentencepiece (unigram, {settings.get('SPM_VOCAB', '?')} pieces, {kind})"
    tokenizer = settings.get("TOKENIZER", "?")
    for directory in prepared:
        text = read_text(os.path.join(directory, "tokenizer"))
        if text:
            tokenizer = text.strip()
    return f"words, top {settings.get('NWORDS', '?')} per language, tokenizer {tokenizer}"


def page(args, table: Table, runs: Sequence[Run], command: Sequence[str]) -> Tuple[str, str]:
    """Writes the page, its logs folder and (language models) Figure 1; returns (text, path)."""
    prog = args.prog
    settings = with_scheme_grids(parse_settings(args.settings))
    rows = _rows(runs, prog)
    out = args.out
    stem = out[:-3] if out.endswith(".md") else out
    logs_dir = stem + "-logs"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    _copy_logs(rows, logs_dir, table.kind)
    title = string.Formatter().vformat(table.title, (), _Blank(settings))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# {title}",
        "",
        f"Generated by `recipes/{table.recipe}` on {date} (device: {args.device}).",
        f"Settings: {settings_line(settings)}.",
        PROTOCOL[table.kind],
        _notes(table, settings, args.data, args.prepared),
        "",
    ]
    main_rows, every_run, signatures, gpus = [], [], {}, set()
    for row in rows:
        paper = table.paper.get(row.key, (None, None))
        chosen = row.chosen
        if table.kind == "lm":
            test = perplexity(chosen.file("test.eval.log"))
            if test is None:
                fail(prog, f"no test perplexity in {shown(chosen.file('test.eval.log'))}")
            scores = [fmt(test)]
        else:
            found = bleu_scores(chosen.file("test.bleu"))
            if "BLEU" not in found:
                fail(prog, f"no BLEU in {shown(chosen.file('test.bleu'))}")
            scores = [fmt(found["BLEU"]), fmt(found.get("tok BLEU"))]
            for name, signature in bleu_signatures(chosen.file("test.bleu")).items():
                signatures.setdefault(name, set()).add(signature)
        main_rows.append(
            [row_label(row.key), chosen.gamma, fmt(row.valid[chosen.path]), *scores]
            + [paper_value(p) for p in paper]
        )
        for run in row.runs:
            log = logs.read_log(run.file("train.log"))
            gpus.add(log.gpu or "CPU")
            every_run.append(
                [
                    row.key,
                    run.gamma,
                    fmt(row.valid[run.path]),
                    str(len(log.valid_ppl)),
                    str(log.halvings) if run.lr_scheduler == "paper_halving" else NONE,
                    _duration(log.wall_seconds),
                ]
            )
    if table.kind == "lm":
        header = [
            "Noising scheme",
            "gamma_0",
            "Validation",
            "Test",
            "Paper validation",
            "Paper test",
        ]
        every = ["scheme", "gamma_0", "Validation", "epochs validated", "halvings", "wall time"]
        logs_text = "Training logs of every run:"
    else:
        header = [
            "Scheme",
            "gamma_0",
            "Perplexity",
            "BLEU",
            "tok BLEU",
            "Paper perplexity",
            "Paper BLEU",
        ]
        every = ["row", "gamma_0", "Perplexity", "epochs validated", "halvings", "wall time"]
        logs_text = "Training logs of every run and the detokenized test translations of the chosen gamma_0:"
    name = os.path.basename(logs_dir)
    lines += md_table(header, main_rows)
    if signatures:
        lines += [
            "",
            "sacrebleu signatures: "
            + "; ".join(
                f"{name} `{sig}`" for name, sigs in signatures.items() for sig in sorted(sigs)
            )
            + ".",
        ]
    lines += [
        "",
        "Every run: validation perplexity, epochs, learning-rate halvings (paper_halving runs) and",
        f"wall time of training (fairseq's `wall`, summed over resumptions) on {', '.join(sorted(gpus))}:",
        "",
    ] + md_table(every, every_run)
    lines += ["", f"{logs_text} [`{name}/`]({name}/).", ""]
    if table.kind == "lm":
        lines += figure_1(rows, logs_dir, stem + "-curves.png") or []
    if args.analysis:
        lines += analysis_section.section(args.analysis, stem + "-analysis", prog)
    lines += ["## Commands", "", "Preparation:", ""]
    lines += [_marker_command(os.path.join(d, ".done"), prog) for d in args.prepared]
    lines += [
        "",
        f"Training (one run per {'scheme' if table.kind == 'lm' else 'row'} and gamma_0):",
        "",
    ]
    lines += [_marker_command(run.file(".done"), prog) for row in rows for run in row.runs]
    evaluations = []
    for row in rows:
        evaluations += [_marker_command(run.file("valid.eval.log.done"), prog) for run in row.runs]
    for row in rows:
        tests = ["test.eval.log"] if table.kind == "lm" else ["test.gen", "test.bleu"]
        evaluations += [_marker_command(row.chosen.file(t + ".done"), prog) for t in tests]
    lines += [
        "",
        "Evaluation (valid for every run, test for the chosen gamma_0):",
        "",
    ] + evaluations
    if args.analysis:
        lines += ["", "Analyses (each scheme's chosen run):", ""] + [
            _marker_command(os.path.join(args.analysis, f"{what}.log.done"), prog)
            for what in ("kl", "unseen")
        ]
    lines += [
        "",
        "This page, its logs folder and its figures:",
        "",
        "    " + shown_command(command),
        "",
    ]
    text = "\n".join(lines)
    with open(out + ".part", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(out + ".part", out)
    return text, out


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
    args = parser.parse_args(argv)
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
    runs = [read_run(path, args.prog) for path in args.runs]
    command = [sys.executable, "recipes/report.py"] + list(
        argv if argv is not None else sys.argv[1:]
    )
    text, path = page(args, table, runs, command)
    print()
    print(text)
    print(f"{args.prog}: wrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
