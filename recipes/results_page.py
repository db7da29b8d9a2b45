"""The results page of a recipe: our figures beside the paper's, every run and how its training
ended, the logs, Figure 1, the analyses and every command (``recipes/report.py write``).

A page is honest at every moment. ``partial``: written while runs still train (by
``recipes/rows.py``): a run not yet evaluated shows its last validation perplexity in training,
a run still training or waiting says so. Final: every run has ended. Either way, a figure of a
run that did not reach the end of its protocol (stopped by the time budget or ``--max-epoch``,
still training) is marked, and the header names the rows that did reach it.
"""

import datetime
import json
import os
import shutil
import string
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import analysis_section
from page_format import NONE, duration, fmt, md_table, paper_value
from paper_tables import PROTOCOL, Table, row_label
from recipe_settings import parse_settings, settings_line, with_scheme_grids
from run_folders import (
    Run,
    bleu_scores,
    bleu_signatures,
    choose,
    flag_value,
    fresh,
    perplexity,
    read_text,
)
from steps import fail, read_marker, shown, shown_command, shown_line

from fairseq_noising.analysis import logs

UNFINISHED = "†"  # beside a figure of a run that did not reach the end of its protocol


def halvings(log: logs.RunLog) -> int:
    """Halvings so far: paper_halving's count (its decision after the last epoch too), or, in a
    log without its lines, the learning rate's drops from one epoch to the next."""
    return log.halving[0] if log.halving else log.halvings


def ending(run: Run, log: logs.RunLog) -> Tuple[bool, str]:
    """(whether the run reached the end of its protocol, how its training ended or where it is)."""
    cmd = run.command.split()
    halving = run.lr_scheduler == "paper_halving"
    done = int(max(log.valid_ppl, default=0))
    where = f"after epoch {done}"
    inside = log.stopped_at if run.state != "training" else log.position
    if inside and inside[0] in (done, done + 1) and inside[1] < inside[2]:
        where = f"in epoch {inside[0]} ({inside[1] / inside[2]:.0%} of it)"
    if log.current_lr is not None:
        where += f", lr {log.current_lr:g}"
    if halving:
        where += f", {halvings(log)} of {flag_value(cmd, '--halvings', '8')} halvings"
    if run.state == "done":
        if log.stop == "halvings" or (not halving and log.stop != "max_update"):
            ended = {"halvings": "all halvings done", "patience": "--patience"}.get(log.stop)
            return True, f"end of the protocol ({ended or '--max-epoch'}, epoch {done})"
        cap = "--max-update" if log.stop == "max_update" else "--max-epoch"
        return False, f"stopped by {cap} {where}"
    if run.state == "budget":
        return False, f"stopped by the time budget {where}"
    if run.state == "failed":
        return False, f"FAILED ({run.failure})"
    if run.state == "training":
        return False, f"training, {where}"
    return False, "waiting to start"


@dataclass
class Row:
    """One row of the main table: its runs, their validation perplexities (stateful evaluation;
    None before it), and the run shown (the chosen gamma_0, or the best so far)."""

    key: str
    runs: List[Run]
    valid: Dict[str, Optional[float]]
    chosen: Optional[Run]


def _rows(runs: Sequence[Run], prog: str, partial: bool) -> List[Row]:
    grouped: Dict[str, List[Run]] = {}
    for run in runs:
        grouped.setdefault(run.row, []).append(run)
    rows = []
    for key, members in grouped.items():
        valid = {}
        for run in members:
            path = run.file("valid.eval.log")
            valid[run.path] = perplexity(path) if fresh(path) else None
            if valid[run.path] is None and not partial and run.state in ("done", "budget"):
                fail(prog, f"no validation perplexity in {shown(path)}")
        evaluated = [(run.path, valid[run.path]) for run in members if valid[run.path] is not None]
        chosen = choose(evaluated)
        rows.append(Row(key, members, valid, next((r for r in members if r.path == chosen), None)))
    return rows


def _copy_logs(rows: Sequence[Row], logs_dir: str, kind: str) -> None:
    shutil.rmtree(logs_dir, ignore_errors=True)
    os.makedirs(logs_dir)
    for row in rows:
        for run in row.runs:
            if os.path.isfile(run.file("train.log")):
                shutil.copyfile(
                    run.file("train.log"), os.path.join(logs_dir, f"{run.name}.train.log")
                )
        detok = row.chosen.file("test.detok") if row.chosen else ""
        if kind == "translation" and os.path.isfile(detok):
            shutil.copyfile(detok, os.path.join(logs_dir, f"{row.chosen.name}.test.detok"))


def _curve_run(row: Row, train_logs: Dict[str, logs.RunLog]) -> Optional[Run]:
    """The chosen run, or before the evaluations the one with the best validation so far."""
    if row.chosen is not None:
        return row.chosen
    seen = [r for r in row.runs if train_logs[r.path].valid_ppl]
    return min(seen, key=lambda r: train_logs[r.path].best_valid_ppl) if seen else None


def figure_1(rows, train_logs, logs_dir: str, png: str) -> Optional[List[str]]:
    """Figure 1 (train and valid perplexity per epoch, none against the chosen kn run) from the
    copied logs: writes the PNG and its numbers (``.json``); returns the page's lines, or None
    when the page has no none or no kn run with a validated epoch."""
    by_key = {row.key: _curve_run(row, train_logs) for row in rows}
    if by_key.get("none") is None or by_key.get("kn") is None:
        return None
    from fairseq_noising.analysis import plots

    curves = {}
    for label, run in (
        ("none", by_key["none"]),
        (f"kn gamma_0 {by_key['kn'].gamma}", by_key["kn"]),
    ):
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


class _Blank(dict):
    def __missing__(self, key):
        return "?"


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


def _how_run(settings: Dict[str, str], device: str) -> str:
    """How the runs were trained: side by side, MPS, time budget (the recipe's settings)."""
    jobs = settings.get("JOBS") or ("every run" if device == "cuda" else "one per core")
    text = f"Runs trained side by side ({jobs} at a time) on {device}"
    text += ", under CUDA MPS" if settings.get("MPS") == "1" else ", without CUDA MPS"
    if settings.get("TIME_BUDGET"):
        text += (
            f"; time budget {settings['TIME_BUDGET']} (each training got fairseq's "
            "`--stop-time-hours` so that the evaluations and this page fit in it)"
        )
    return text + "."


def _test_scores(table: Table, run: Run, prog: str, partial: bool, signatures) -> List[str]:
    """Our test figures of a row's chosen run (language models: perplexity; translation: BLEU,
    tok BLEU); empty cells while they are not there (partial pages only)."""
    if table.kind == "lm":
        path = run.file("test.eval.log")
        test = perplexity(path) if fresh(path) else None
        if test is None and not partial:
            fail(prog, f"no test perplexity in {shown(path)}")
        return [fmt(test)]
    path = run.file("test.bleu")
    found = bleu_scores(path) if fresh(path) else {}
    if "BLEU" not in found:
        if not partial:
            fail(prog, f"no BLEU in {shown(path)}")
        return [NONE, NONE]
    for name, signature in bleu_signatures(path).items():
        signatures.setdefault(name, set()).add(signature)
    return [fmt(found["BLEU"]), fmt(found.get("tok BLEU"))]


def page(args, table: Table, runs: Sequence[Run], command: Sequence[str]) -> Tuple[str, str]:
    """Writes the page, its logs folder and (language models) Figure 1; returns (text, path)."""
    prog, partial = args.prog, args.partial
    settings = with_scheme_grids(parse_settings(args.settings))
    rows = _rows(runs, prog, partial)
    train_logs = {
        run.path: logs.read_log(run.file("train.log"))
        if os.path.isfile(run.file("train.log"))
        else logs.RunLog()
        for run in runs
    }
    endings = {run.path: ending(run, train_logs[run.path]) for run in runs}
    out = args.out
    stem = out[:-3] if out.endswith(".md") else out
    logs_dir = stem + "-logs"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    _copy_logs(rows, logs_dir, table.kind)
    title = string.Formatter().vformat(table.title, (), _Blank(settings))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    complete = [run.name for run in runs if endings[run.path][0]]
    lines = [f"# {title}", ""]
    if partial:
        ended = sum(run.state not in ("training", "waiting") for run in runs)
        lines += [
            f"**In progress** ({date}): {ended} of {len(runs)} trainings have ended; this page is "
            "rewritten as runs progress.",
            "",
        ]
    lines += [
        f"Generated by `recipes/{table.recipe}` on {date} (device: {args.device}).",
        f"Settings: {settings_line(settings)}.",
        _how_run(settings, args.device),
        "Reached the end of the training protocol: "
        + (", ".join(complete) if complete else "no run")
        + f". Figures marked {UNFINISHED} come from runs that did not (the table of every run says "
        "where each stopped): they are not a reproduction of the paper's figures.",
        PROTOCOL[table.kind],
        _notes(table, settings, args.data, args.prepared),
        "",
    ]
    main_rows, every_run, signatures, gpus = [], [], {}, set()
    for row in rows:
        paper = table.paper.get(row.key, (None, None))
        chosen = row.chosen
        if chosen is not None:
            mark = "" if endings[chosen.path][0] else UNFINISHED
            scores = _test_scores(table, chosen, prog, partial, signatures)
            cells = [chosen.gamma, fmt(row.valid[chosen.path]) + mark]
            cells += [s + mark if s != NONE else s for s in scores]
        else:
            states = sorted({run.state for run in row.runs})
            cells = [NONE, "/".join(states)] + [NONE] * (1 if table.kind == "lm" else 2)
        main_rows.append([row_label(row.key), *cells] + [paper_value(p) for p in paper])
        for run in row.runs:
            log = train_logs[run.path]
            gpus.add(log.gpu or "CPU")
            valid = row.valid[run.path]
            if valid is None and log.valid_ppl:  # not evaluated yet: fairseq's last validation
                valid_cell = fmt(log.valid_ppl[max(log.valid_ppl)]) + "*"
            else:
                valid_cell = fmt(valid)
            every_run.append(
                [
                    row.key,
                    run.gamma,
                    valid_cell,
                    str(len(log.valid_ppl)),
                    str(halvings(log)) if run.lr_scheduler == "paper_halving" else NONE,
                    duration(log.wall_seconds),
                    endings[run.path][1],
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
            + "; ".join(f"{n} `{sig}`" for n, sigs in signatures.items() for sig in sorted(sigs))
            + ".",
        ]
    lines += [
        "",
        "Every run: validation perplexity, epochs, learning-rate halvings (paper_halving runs),",
        f"wall time of training (fairseq's `wall`, summed over resumptions) on {', '.join(sorted(gpus))},",
        "and how its training ended (* fairseq's validation in training, before the evaluation):",
        "",
    ] + md_table(every + ["training"], every_run)
    lines += ["", f"{logs_text} [`{name}/`]({name}/).", ""]
    if table.kind == "lm":
        lines += figure_1(rows, train_logs, logs_dir, stem + "-curves.png") or []
    if args.analysis:
        missing_ok = partial or bool(settings.get("TIME_BUDGET"))
        lines += analysis_section.section(args.analysis, stem + "-analysis", prog, missing_ok)
    lines += _commands(args, table, rows, command)
    text = "\n".join(lines)
    with open(out + ".part", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(out + ".part", out)
    return text, out


def _commands(args, table: Table, rows: Sequence[Row], command: Sequence[str]) -> List[str]:
    """The page's last section: every command that made it, as recorded in the markers."""

    def recorded(path: str) -> List[str]:
        line = read_marker(path)
        if line is None and not args.partial and path.endswith(".done"):
            fail(args.prog, f"{shown(path)} is missing: did that step run?")
        return [] if line is None else ["    " + shown_line(line)]

    lines = ["## Commands", "", "Preparation:", ""]
    for directory in args.prepared:
        lines += recorded(os.path.join(directory, ".done"))
    lines += [
        "",
        f"Training (one run per {'scheme' if table.kind == 'lm' else 'row'} and gamma_0):",
        "",
    ]
    lines += ["    " + shown_line(run.command) for row in rows for run in row.runs]
    evaluations = []
    for row in rows:
        for run in row.runs:
            if run.state in ("done", "budget") or args.partial:
                evaluations += recorded(run.file("valid.eval.log.done"))
    tests = ["test.eval.log"] if table.kind == "lm" else ["test.gen", "test.bleu"]
    for row in rows:
        if row.chosen is not None:
            for t in tests:
                evaluations += recorded(row.chosen.file(t + ".done"))
    lines += [
        "",
        "Evaluation (valid for every run, test for the chosen gamma_0):",
        "",
    ] + evaluations
    if args.analysis:
        analyses = []
        for what in ("kl", "unseen"):
            path = os.path.join(args.analysis, f"{what}.log.done")
            if os.path.isfile(path):
                analyses += recorded(path)
        if analyses:
            lines += ["", "Analyses (each scheme's chosen run):", ""] + analyses
    return lines + [
        "",
        "This page, its logs folder and its figures:",
        "",
        "    " + shown_command(command),
        "",
    ]
