"""A results page's text (the package :mod:`..page` writes it): the summary, the tables (:mod:`.markdown`),
Figure 1 and the commands; the rows' files beside it."""

import datetime
import os
import shlex
import shutil
import statistics
from typing import Dict, List, Sequence

from .. import events, progress, record
from .figure import figure_1
from .markdown import (
    INSIDE,
    UNFINISHED,
    duration,
    every_table,
    gamma_choice,
    main_table,
    seeds_table,
    stops,
)

ROW_FILES = ("row.json", events.FILE, "hydra_train.log", "eval.log", "test.hyp", "test.detok")
ROW_FILES += tuple(f".hydra/{n}.yaml" for n in ("config", "hydra", "overrides"))


def _copy_rows(rows: List[Dict], rows_dir: str) -> None:
    """Each row's files (:data:`ROW_FILES`, no checkpoint) into ``rows_dir/NAME``, replaced as a
    whole; the copied record keeps what the row's checkpoint_last.pt and its process say now
    (``as_paged``, ``status``): read back elsewhere or later, it shows the row as paged."""
    fresh = rows_dir + f".{os.getpid()}.part"
    shutil.rmtree(fresh, ignore_errors=True)
    for row in rows:
        for name in ROW_FILES:
            path = os.path.join(row["run_dir"], name)
            if os.path.isfile(path):
                os.makedirs(os.path.dirname(os.path.join(fresh, row["name"], name)), exist_ok=True)
                shutil.copyfile(path, os.path.join(fresh, row["name"], name))
        copy = os.path.join(fresh, row["name"])
        rec = record.read_record(copy) if os.path.isdir(copy) else None
        if rec is not None and row.get("training"):
            rec["as_paged"] = {k: row["training"][k] for k in progress.AT_END}
            rec["status"] = row["status"]
            record.write(copy, rec)
    os.makedirs(fresh, exist_ok=True)
    old = rows_dir + f".{os.getpid()}.old"
    if os.path.isdir(rows_dir):
        os.replace(rows_dir, old)
    os.replace(fresh, rows_dir)
    shutil.rmtree(old, ignore_errors=True)


def _as_copied(row: Dict, rows_dir: str) -> Dict:
    """The row as its copy beside the page reads, which is what the page shows: a row that trains
    on while the page is written (its progress file a line longer when copied than when read) is
    shown as its copied records have it, so every figure can be recomputed from them. A row
    whose copy cannot be read back is shown as read."""
    copy = record.read(os.path.join(rows_dir, row["name"]))
    if copy is None or copy["status"] == "unreadable" or row["status"] == "unreadable":
        return row
    return dict(copy, run_dir=row["run_dir"])


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + "s" * (n != 1)


def _cpu(row: Dict) -> str:
    """``CPU (AMD EPYC, 2 cores)``: the model and cores of the process that last trained the
    row (a record from before the model was kept: the cores alone)."""
    proc = row.get("process") or {}
    cores = f"{proc.get('cpus', row.get('cpus', '?'))} cores"
    return f"CPU ({proc['cpu']}, {cores})" if proc.get("cpu") else f"CPU ({cores})"


def precision_words(rows: List[Dict]) -> str:
    """The precision the rows trained and were evaluated in (``task.precision``)."""
    trained = sorted({r.get("precision", "fp32") for r in rows})
    autocast = "torch.autocast, fp32 weights and checkpoints"
    if trained in ([], ["fp32"]):
        return "Precision: fp32 (training and evaluation)."
    if trained == ["bf16"]:
        return (
            f"Precision: every row trained in bf16 ({autocast}); validation and evaluation in fp32."
        )
    return (
        f"Precision: each row's column; bf16 rows trained under {autocast}; validation and "
        "evaluation in fp32 for every row." + _epoch_times(rows)
    )


def _epoch_times(rows: List[Dict]) -> str:
    """fp32 and bf16 rows: each precision's epoch time (the median of its rows' medians of
    fairseq's ``train_wall`` over their finished epochs) and bf16's over fp32's."""
    seconds: Dict[str, List[float]] = {}
    for r in rows:
        if (r.get("training") or {}).get("epoch_seconds"):
            seconds.setdefault(r.get("precision", "fp32"), []).append(
                r["training"]["epoch_seconds"]
            )
    if sorted(seconds) != ["bf16", "fp32"]:
        return ""
    fp32, bf16 = (statistics.median(seconds[p]) for p in ("fp32", "bf16"))
    return (
        f" An epoch's training time (fairseq's train_wall, the median over epochs): fp32 "
        f"{duration(fp32)}, bf16 {duration(bf16)}; bf16 / fp32 {bf16 / fp32:.2f}."
    )


def _summary(
    rows: List[Dict],
    good: List[Dict],
    groups: Dict[str, List[Dict]],
    table: Dict,
    lm: bool,
    seeds: bool,
    path_as: Sequence[str],
) -> List[str]:
    """The title, where the rows are, their data, hardware and time, and what the figures are."""
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# {table['title']}", ""]
    running = sum(r["status"] == "training" for r in good)
    stopped = sum(r["status"] == "stopped" for r in good)
    if running:
        also = f", {stopped} stopped (no process runs them)" if stopped else ""
        lines += [
            f"**In progress** ({date}): of {_plural(len(rows), 'row')}, {running} training{also}.",
            "",
        ]
    elif stopped:
        lines += [
            f"**Stopped** ({date}): of {_plural(len(rows), 'row')}, {stopped} stopped "
            "before their end and no process runs them; the sweep's command run again "
            "resumes them.",
            "",
        ]
    mps = lambda r: " (MPS)" if r.get("mps") else " (no MPS)"  # noqa: E731
    hardware = sorted({r["gpu"] + mps(r) if r.get("gpu") else _cpu(r) for r in good})
    budgets = sorted({r["config"]["optimization"].get("stop_time_hours") or 0 for r in good})
    clock = [r["training"]["training_seconds"] for r in good if r["training"]["training_seconds"]]
    walls = [r["training"]["wall_seconds"] for r in good if r["training"]["wall_seconds"]]
    data = {record.relative(str(r["config"]["task"]["data"]), r["cwd"]) for r in good}
    data = sorted({_shown(d, path_as) for d in data})  # one name for each folder
    named = f" ({table['data']['name']})" if table["note"] and table["data"].get("name") else ""
    complete = [r["name"] for r in good if record.ending(r) == "protocol"]
    unrecorded = [r["name"] for r in good if not r["training"]["recorded"]]
    imported = [r["name"] for r in good if r["training"]["recorded"] == "imported"]
    inside = any(((r.get("evaluation") or {}).get("chosen") or {}).get("inside") for r in good)
    lines += [
        f"Written on {date} from the records of {_plural(len(rows), 'row')}. Data: "
        + ", ".join(f"`{d}`" for d in data)
        + f"{named}. Hardware: {', '.join(hardware)}. Training time: "
        f"{duration(max(clock, default=None))} for the longest row, "
        f"{duration(sum(clock) if clock else None)} summed over rows; wall time "
        f"{duration(max(walls, default=None))} for the longest. Time budget "
        "per row: " + (", ".join(f"{b:g} h" for b in budgets if b) or "none") + ".",
        "Reached the end of the training protocol: "
        + (", ".join(complete) or "no row")
        + f". Figures marked {UNFINISHED} come from rows that did not (see every row below).",
        precision_words(good),
    ]
    if inside:
        lines.append(
            f"Figures marked {INSIDE} come from a model that a validation inside an "
            "epoch chose, which the paper's protocol never picks."
        )
    if unrecorded:
        lines.append(
            "Rows without a progress file (their epochs, processes and wall time are "
            "unknown): " + ", ".join(unrecorded) + "."
        )
    if imported:
        lines.append(
            "Rows whose progress was imported from their json training log (`--import-logs`: "
            "each process's start to the second, the checkpoint it resumed from by its updates): "
            + ", ".join(imported)
            + "."
        )
    lines += [
        "",
        "Perplexities from stateful evaluation of checkpoint_best.pt (the split read as one stream)."
        if lm
        else "Perplexity per target token on valid; BLEU: sacrebleu on detokenized test output "
        "against the raw references; tok BLEU: tokenized against tokenized.",
        gamma_choice(groups, seeds) + (" " + table["note"] if table["note"] else ""),
        "",
    ]
    return lines


def _shown(command: str, path_as: Sequence[str]) -> str:
    """``command`` with each path under a ``FOLDER=SHOWN`` of ``path_as`` written under SHOWN
    (as a path relative to the sweep's folder: the page's commands run from a checkout)."""
    pairs = [a.split("=", 1) for a in path_as]
    words = []
    for word in shlex.split(command):
        key, eq, value = (
            word.partition("=") if "=" in word and not word.startswith("-") else ("", "", word)
        )
        for folder, shown in pairs:
            folder = folder.rstrip("/")
            if value == folder or value.startswith(folder + "/"):
                rest = value[len(folder) :]
                value = (
                    shown.rstrip("/") + rest if shown not in (".", "") else rest.lstrip("/") or "."
                )
                break
        words.append(key + eq + value)
    return shlex.join(words)


def _commands(good: List[Dict], command: str, path_as: Sequence[str], lm: bool) -> List[str]:
    rows = [_shown(r["command"], path_as) for r in good]
    evals = [
        _shown(c, path_as) for r in good for c in (r.get("evaluation") or {}).get("commands", [])
    ]
    lines = [
        "## Commands",
        "",
        "Run from the folder the sweep was started in (where its config folder is). Each row (it",
        "resumes from its checkpoint_last.pt when run again; a row that has ended stays as it is):",
        "",
        *("    " + c for c in rows),
        "",
    ]
    if evals:
        lines += [
            "Each row's evaluation: `fairseq-noise-eval ROW_FOLDER` computes the figures above and",
            "records them in the row's `row.json`;",
            "the fairseq-eval-lm commands print the same perplexities, rounded:"
            if lm
            else "fairseq-validate prints the same validation perplexity (its ppl, rounded), and "
            "fairseq-generate the test translations the BLEU scores, as tokens (its own BLEU "
            "line is fairseq's tokenized BLEU against the binarized references, not the "
            "page's):",
            "",
            *("    " + c for c in evals),
            "",
        ]
    return lines + ["This page:", "", "    " + _shown(command, path_as), ""]


def render(
    rows: List[Dict],
    table: Dict,
    show_paper: bool,
    out: str,
    command: str,
    path_as: Sequence[str] = (),
) -> str:
    """Writes the page of ``rows`` to ``out`` (its rows' files and Figure 1 beside it); its
    text."""
    stem = out[:-3] if out.endswith(".md") else out
    rows_dir = stem + "-rows"
    _copy_rows(rows, rows_dir)
    rows = [_as_copied(row, rows_dir) for row in rows]
    good = [r for r in rows if r["status"] != "unreadable"]
    lm = not any(r["config"]["task"]["_name"].endswith("translation") for r in good)
    groups: Dict[str, List[Dict]] = {}
    for r in good:
        groups.setdefault(r["key"], []).append(r)
    seeds = len({r.get("seed") for r in good}) > 1
    lines = _summary(rows, good, groups, table, lm, seeds, path_as)
    if table["paper"] and not show_paper:
        lines += [
            "The paper's figures are left out: these rows did not train on the paper's data "
            "(`fairseq-noise-page --paper` shows them).",
            "",
        ]
    plateau = table.get("plateau_ppl")  # translation: rows that halved before using the source
    lines += main_table(groups, table, show_paper, lm, seeds) + [""]
    over_seeds = seeds_table(groups, lm, plateau) if seeds else []
    lines += over_seeds + [""] * bool(over_seeds)
    lines += every_table(rows, lm, seeds, plateau) + [""]
    lines += stops(good)
    link = os.path.basename(rows_dir)
    lines += [
        f"Each row's record, progress, evaluation output and training log: [`{link}/`]({link}/).",
        "",
    ]
    lines += figure_1(groups, stem + "-curves.png", lm, plateau)
    text = "\n".join(lines + _commands(good, command, path_as, lm))
    part = f"{out}.{os.getpid()}.part"
    with open(part, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(part, out)
    return text
