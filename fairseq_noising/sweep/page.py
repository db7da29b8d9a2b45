"""The results page of a sweep, from its rows (:mod:`.record`), at any moment.

    fairseq-noise-page SWEEP_DIR [--out PAGE.md] [--table NAME] [--title TEXT] [--paper|--no-paper]

Our figures (gamma_0 chosen per row key on validation, averaged over seeds), beside the paper's
when the rows trained on the paper's data (:mod:`.tables`); every row and how its training
ended or where it is; Figure 1 for a language model (none against the chosen kn row); the logs
copied beside the page; every command, as it runs from the folder the sweep ran in. Rows still
training show fairseq's last validation perplexity (marked *); a figure of a row that did not
reach the end of its protocol is marked †. Each row rewrites the page when it ends (the sweep's
callback; one writer at a time); run this command for a page at any other moment. A row whose
record cannot be read gets its line; the page writer never fails on a row.
"""

import argparse
import datetime
import fcntl
import logging
import os
import shlex
import shutil
import sys
from contextlib import contextmanager
from statistics import mean
from typing import Dict, List, Optional

from ..analysis.logs import lowered_at
from ..errors import NoisingError
from . import paper, record, tables

UNFINISHED = "†"
NONE = "—"
ENDINGS = {
    "time": "stopped by the time budget",
    "max_update": "capped by --max-update",
    "max_epoch": "capped by --max-epoch",
    "training": "training",
    "ended": "ended",
}
LOCK = ".results.lock"


def md_table(header: List[str], rows: List[List[object]]) -> List[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + [
        "| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows
    ]


def fmt(value: Optional[float]) -> str:
    return NONE if value is None else f"{value:.2f}"


def duration(seconds: Optional[float]) -> str:
    """``45 s``, ``12 min`` or ``2 h 05 min``."""
    if seconds is None:
        return NONE
    if seconds < 60:
        return f"{seconds:.0f} s"
    hours, minutes = divmod(int(round(seconds / 60.0)), 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def how(row: Dict) -> str:
    """How a row's training ended, or where it is, in words."""
    ending = record.ending(row)
    if ending in ("failed", "unreadable"):
        return f"{ending.upper()} ({row.get('error', '?')})"
    t = row["training"]
    if ending == "protocol":
        rule = "patience" if t["stop"] == "patience" else f"all {t['max_halvings']} halvings"
        return f"end of the protocol (epoch {t['epochs']}, {rule})"
    if ending == "stopped":
        at = t.get("resume_at") or "its start"
        return f"stopped: its process is gone ({record.where(row)}); resumes from {at}"
    return f"{ENDINGS[ending]}, {record.where(row)}"


def _scores(row: Dict, lm: bool) -> List[Optional[float]]:
    """Validation perplexity, then test perplexity or BLEU and tok BLEU, of an evaluated row."""
    ev = row.get("evaluation") or {}
    if lm:
        return [ev.get("valid_ppl"), ev.get("test_ppl")]
    return [
        ev.get("valid_ppl"),
        (ev.get("bleu") or {}).get("score"),
        (ev.get("tok_bleu") or {}).get("score"),
    ]


def _evaluated(row: Dict) -> bool:
    return row["status"] == "ended" and (row.get("evaluation") or {}).get("valid_ppl") is not None


def chosen(rows: List[Dict]) -> List[Dict]:
    """The rows (one per seed) of a key's gamma_0 with the lowest mean evaluated validation
    perplexity (the first gamma_0 of equals)."""
    by_gamma: Dict[float, List[Dict]] = {}
    for r in rows:
        if _evaluated(r):
            by_gamma.setdefault(r["gamma"], []).append(r)
    if not by_gamma:
        return []
    best = min(
        sorted(by_gamma), key=lambda g: mean(r["evaluation"]["valid_ppl"] for r in by_gamma[g])
    )
    return by_gamma[best]


def _figure_1(groups: Dict[str, List[Dict]], png: str, lm: bool) -> List[str]:
    """none against kn, every seed of the gamma_0 the table chose (before any row of the key
    is evaluated: its row with the lowest validation so far), one pair of curves each."""
    runs, halved = {}, {}
    for key in ("none", "kn"):
        rows = [r for r in groups.get(key, []) if r["training"]["valid_ppl"]]
        if not rows:
            return []
        picked = chosen(rows) or [
            min(rows, key=lambda r: min(v for v in r["training"]["valid_ppl"].values() if v))
        ]
        for row in sorted(picked, key=lambda r: r.get("seed") or 0):
            t = row["training"]
            label = key if key == "none" else f"kn gamma_0 {row['gamma']:g}"
            label += f" seed {row.get('seed')}" if len(picked) > 1 else ""
            runs[label] = tuple(
                {int(e): p for e, p in t[s].items() if p is not None}
                for s in ("train_ppl", "valid_ppl")
            )
            lr = {int(e): r for e, r in (t.get("train_lr") or {}).items() if r is not None}
            halved[label] = lowered_at(lr)
    from ..analysis import plots  # matplotlib: only when drawing

    plots.curves(runs, png, halved=halved)
    what = "Figure 1 of the paper" if lm else "As the paper's Figure 1, for translation"
    kn = "bigram Kneser-Ney noising" if lm else "bigram Kneser-Ney noising on both sides"
    return [
        f"{what}: training (dashed; kn's on noised data) and validation perplexity",
        f"per epoch, unnoised against {kn} (every seed of the gamma_0 in the table);",
        "a triangle marks the first epoch at each halved learning rate.",
        "",
        f"![training and validation curves]({os.path.basename(png)})",
        "",
    ]


def _copy_logs(rows: List[Dict], logs_dir: str) -> None:
    """Each row's log into ``logs_dir``, replaced as a whole."""
    fresh = logs_dir + f".{os.getpid()}.part"
    shutil.rmtree(fresh, ignore_errors=True)
    os.makedirs(fresh)
    for row in rows:
        log = os.path.join(row["run_dir"], "hydra_train.log")
        if os.path.isfile(log):
            shutil.copyfile(log, os.path.join(fresh, f"{row['name']}.train.log"))
    old = logs_dir + f".{os.getpid()}.old"
    if os.path.isdir(logs_dir):
        os.replace(logs_dir, old)
    os.replace(fresh, logs_dir)
    shutil.rmtree(old, ignore_errors=True)


def _row_cells(row: Dict, lm: bool, seeds: bool) -> List[object]:
    t = row.get("training") or {}
    scores = _scores(row, lm) if _evaluated(row) else [None] * (2 if lm else 3)
    if not _evaluated(row) and t.get("last_valid_ppl") is not None:
        valid = fmt(t["last_valid_ppl"]) + "*"
    else:
        valid = fmt(scores[0])
    halvings = NONE if t.get("halvings") is None else str(t["halvings"])
    cells = [row["name"], f"{row.get('gamma', 0):g}"] + ([str(row.get("seed"))] if seeds else [])
    cells += [valid, *(fmt(s) for s in scores[1:]), t.get("epochs", NONE), halvings]
    return cells + [duration(t.get("wall_seconds")), how(row)]


def _summary(rows: List[Dict], good: List[Dict], table: Dict, lm: bool, seeds: bool) -> List[str]:
    """The title, where the rows are, their data, hardware and time, and what the figures are."""
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# {table['title']}", ""]
    state = [(n, s) for s in ("training", "stopped") if (n := sum(r["status"] == s for r in good))]
    if state:
        counts = ", ".join(f"{n} {s}" for n, s in state)
        lines += [f"**In progress** ({date}): of {len(rows)} rows, {counts}.", ""]
    cores = lambda r: (r.get("process") or {}).get("cpus", r.get("cpus", "?"))  # noqa: E731
    mps = lambda r: " (MPS)" if r.get("mps") else " (no MPS)"  # noqa: E731
    hardware = sorted(
        {r["gpu"] + mps(r) if r.get("gpu") else f"CPU ({cores(r)} cores)" for r in good}
    )
    budgets = sorted({r["config"]["optimization"].get("stop_time_hours") or 0 for r in good})
    walls = [r["training"]["wall_seconds"] or 0 for r in good]
    data = sorted({record.relative(str(r["config"]["task"]["data"]), r["cwd"]) for r in good})
    named = f" ({table['data']['name']})" if table["note"] and table["data"].get("name") else ""
    complete = [r["name"] for r in good if record.ending(r) == "protocol"]
    lines += [
        f"Written on {date} from the records of {len(rows)} rows. Data: "
        + ", ".join(f"`{d}`" for d in data)
        + f"{named}. Hardware: {', '.join(hardware)}. Training wall time: "
        f"{duration(max(walls, default=0))} for the longest row, {duration(sum(walls))} summed "
        "over rows. Time budget per row: "
        + (", ".join(f"{b:g} h" for b in budgets if b) or "none")
        + ".",
        "Reached the end of the training protocol: "
        + (", ".join(complete) or "no row")
        + f". Figures marked {UNFINISHED} come from rows that did not (see every row below).",
        "",
        "Perplexities from stateful evaluation of checkpoint_best.pt (the split read as one stream)."
        if lm
        else "Perplexity per target token on valid; BLEU: sacrebleu on detokenized test output "
        "against the raw references; tok BLEU: tokenized against tokenized.",
        "gamma_0 chosen per row on validation perplexity"
        + (", averaged over seeds; the figures are the seeds' mean." if seeds else ".")
        + (" " + table["note"] if table["note"] else ""),
        "",
    ]
    return lines


def _main_table(groups, table: Dict, show_paper: bool, lm: bool, seeds: bool) -> List[str]:
    """One line per row key: the chosen gamma_0's figures (marked † short of the protocol), the
    seeds and their spread, the paper's figures."""
    main, signatures = [], set()
    for key, group in sorted(groups.items(), key=lambda item: paper.row_order(item[0])):
        picked = chosen(group)
        figures = [NONE] * (3 if lm else 4)
        if picked:
            mark = "" if all(record.ending(r) == "protocol" for r in picked) else UNFINISHED
            cols = list(zip(*(_scores(r, lm) for r in picked)))
            means = [mean(c) if all(v is not None for v in c) else None for c in cols]
            figures = [f"{picked[0]['gamma']:g}"] + [fmt(v) + mark * (v is not None) for v in means]
            for r in picked:
                ev = r["evaluation"]
                signatures |= {ev[k]["signature"] for k in ("bleu", "tok_bleu") if k in ev}
        cells = [paper.row_label(key), *figures]
        if seeds:
            spread = [s[1] for s in (_scores(r, lm) for r in picked) if s[1] is not None]
            cells += [len(picked), fmt(max(spread) - min(spread)) if len(spread) > 1 else NONE]
        if show_paper:
            cells += [_paper_cell(p) for p in table["paper"].get(key, [None, None])]
        main.append(cells)
    header = ["Noising scheme" if lm else "Row", "gamma_0", "Validation", *_score_names(lm)]
    header += ["seeds", f"{'Test' if lm else 'BLEU'} spread"] if seeds else []
    if show_paper:
        header += ["Paper validation", "Paper test"] if lm else ["Paper perplexity", "Paper BLEU"]
    lines = md_table(header, main)
    if signatures:
        signed = "; ".join(f"`{s}`" for s in sorted(signatures))
        lines += ["", f"sacrebleu signatures: {signed}."]
    return lines


def _score_names(lm: bool) -> List[str]:
    return ["Test"] if lm else ["BLEU", "tok BLEU"]


def _every_table(rows: List[Dict], lm: bool, seeds: bool) -> List[str]:
    header = ["row", "gamma_0"] + ["seed"] * seeds + ["Validation", *_score_names(lm)]
    header += ["epochs", "halvings", "wall time", "training"]
    cells = [
        _row_cells(r, lm, seeds)
        if r["status"] != "unreadable"
        else [r["name"]] + [NONE] * (len(header) - 2) + [how(r)]
        for r in rows
    ]
    return [
        "Every row: validation perplexity (* fairseq's last validation, before the row's own",
        "evaluation), epochs validated, learning-rate halvings, training wall time, how it ended:",
        "",
        *md_table(header, cells),
    ]


def _commands(good: List[Dict], command: str) -> List[str]:
    lines = [
        "## Commands",
        "",
        "Run from the folder the sweep was started in (where its config folder is). Each row (it",
        "resumes from its checkpoint_last.pt when run again):",
        "",
        *("    " + r["command"] for r in good),
        "",
        "Each row's evaluation (`fairseq-noise-eval` records the figures; the fairseq",
        "commands after it print the same figures, rounded):",
        "",
        *("    " + c for r in good for c in (r.get("evaluation") or {}).get("commands", [])),
    ]
    return lines + ["", "This page:", "", "    " + command, ""]


def render(rows: List[Dict], table: Dict, show_paper: bool, out: str, command: str) -> str:
    """Writes the page of ``rows`` to ``out`` (its logs and Figure 1 beside it); its text."""
    stem = out[:-3] if out.endswith(".md") else out
    logs_dir = stem + "-logs"
    _copy_logs(rows, logs_dir)
    good = [r for r in rows if r["status"] != "unreadable"]
    lm = not any(r["config"]["task"]["_name"].endswith("translation") for r in good)
    groups: Dict[str, List[Dict]] = {}
    for r in good:
        groups.setdefault(r["key"], []).append(r)
    seeds = len({r.get("seed") for r in good}) > 1
    lines = _summary(rows, good, table, lm, seeds)
    if table["paper"] and not show_paper:
        lines += [
            "The paper's figures are left out: these rows did not train on the paper's data "
            "(`fairseq-noise-page --paper` shows them).",
            "",
        ]
    lines += _main_table(groups, table, show_paper, lm, seeds) + [""]
    lines += _every_table(rows, lm, seeds) + [""]
    link = os.path.basename(logs_dir)
    lines += [f"Training logs: [`{link}/`]({link}/).", ""]
    lines += _figure_1(groups, stem + "-curves.png", lm)
    text = "\n".join(lines + _commands(good, command))
    part = f"{out}.{os.getpid()}.part"
    with open(part, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(part, out)
    return text


def _paper_cell(value) -> str:
    return NONE if value is None else fmt(float(value)).rstrip("0").rstrip(".")


@contextmanager
def _one_writer(sweep_dir: str):
    """One page writer of a sweep at a time (rows that end together, a user's command)."""
    with open(os.path.join(sweep_dir, LOCK), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write(
    sweep_dir: str,
    out: Optional[str] = None,
    table: Optional[str] = None,
    title: Optional[str] = None,
    show_paper: Optional[bool] = None,
    config_dir: Optional[str] = None,
) -> Optional[str]:
    """Writes the page of a sweep folder (default ``SWEEP_DIR/results.md``); None without rows.
    ``table``: the config whose table to use (default: the rows' own), in ``config_dir``
    (default: the one the rows' sweep was given)."""
    with _one_writer(sweep_dir):
        rows = record.read_sweep(sweep_dir)
        if not rows:
            return None
        good = [r for r in rows if r["status"] != "unreadable"]
        first = good[0] if good else {}
        name = first.get("config_name") or "a sweep"
        if table is not None:
            config_dir = config_dir or first.get("config_dir") or os.path.join("recipes", "config")
            spec = tables.from_config(table, config_dir)
        else:
            spec = tables.spec(first.get("table"), name)
        on_data = tables.on_its_data(spec, good)
        if not on_data:  # the user's data: the table's title and note are not theirs
            data = sorted(
                {record.relative(str(r["config"]["task"]["data"]), r["cwd"]) for r in good}
            )
            spec.update(title=f"{name} on {', '.join(data)}", note="")
        if title:
            spec["title"] = title
        show = bool(spec["paper"]) and (on_data if show_paper is None else show_paper)
        out = out or os.path.join(sweep_dir, "results.md")
        cwd = first.get("cwd") if first.get("cwd") and os.path.isdir(first["cwd"]) else os.getcwd()
        words = ["fairseq-noise-page", record.relative(os.path.abspath(sweep_dir), cwd)]
        words += ["--out", record.relative(os.path.abspath(out), cwd)]
        words += ["--table", table] if table else []
        words += ["--title", title] if title else []
        words += [] if show_paper is None else ["--paper" if show_paper else "--no-paper"]
        render(rows, spec, show, out, shlex.join(words))
        return out


def main(argv=None) -> int:
    if argv is None:  # the command: its own logging, set before fairseq's import-time one (a
        # basicConfig at DEBUG in fairseq.models.wav2vec) would let matplotlib's debug lines out
        logging.basicConfig(format="%(levelname)s | %(name)s | %(message)s", level=logging.INFO)
        logging.getLogger("matplotlib").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(prog="fairseq-noise-page", description=__doc__.split("\n")[0])
    parser.add_argument("sweep_dir", metavar="SWEEP_DIR", help="the sweep folder (hydra.sweep.dir)")
    parser.add_argument("--out", help="the page (default SWEEP_DIR/results.md)")
    parser.add_argument("--table", help="the config whose title and paper's figures to use")
    parser.add_argument("--config-dir", help="where --table's config is (default: the sweep's)")
    parser.add_argument("--title", help="the page's title")
    parser.add_argument(
        "--paper",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show (or leave out) the paper's figures; default: when the rows trained on the "
        "paper's data",
    )
    args = parser.parse_args(argv)
    if not os.path.isdir(args.sweep_dir):
        parser.error(f"SWEEP_DIR {args.sweep_dir} is not a folder")
    try:
        path = write(args.sweep_dir, args.out, args.table, args.title, args.paper, args.config_dir)
    except NoisingError as e:
        parser.error(str(e))
    if path is None:
        parser.error(f"SWEEP_DIR {args.sweep_dir} holds no row records (row.json)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
