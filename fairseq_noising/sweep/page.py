"""The results page of a sweep, from its rows' records (:mod:`.record`), at any moment.

    fairseq-noise-page SWEEP_DIR [--out PAGE.md] [--table ptb-medium]

Our figures beside the paper's (:mod:`.paper`; gamma_0 chosen per row key on validation
perplexity), every row and how its training ended or where it is, Figure 1 for a language model
(none against the chosen kn row), the logs copied beside the page, and every command. Rows still
training show fairseq's last validation perplexity (marked *); a figure of a row that did not reach
the end of its protocol is marked †. Each row rewrites the page when it ends (the sweep's
callback); run this command for a page at any other moment.
"""

import argparse
import datetime
import os
import shlex
import shutil
import sys
from typing import Dict, List, Optional

from . import paper, record

UNFINISHED = "†"
NONE = "—"
ENDINGS = {
    "protocol": "end of the protocol",
    "time": "stopped by the time budget",
    "max_update": "stopped by --max-update",
    "max_epoch": "stopped by --max-epoch",
    "training": "training",
}


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


def name(rec: Dict) -> str:
    return os.path.basename(rec["run_dir"])


def how(rec: Dict) -> str:
    ending = record.ending(rec)
    if ending == "failed":
        return f"FAILED ({rec.get('error', '?')})"
    text = ENDINGS[ending]
    if ending == "protocol":
        return f"{text} (epoch {rec['training']['epochs']})"
    return f"{text}, {record.where(rec)}"


def chosen(rows: List[Dict]) -> Optional[Dict]:
    """The row of a key with the lowest evaluated validation perplexity (the first of equals)."""
    evaluated = [r for r in rows if r["status"] == "ended"]
    return min(evaluated, key=lambda r: r["evaluation"]["valid_ppl"]) if evaluated else None


def _figure_1(groups: Dict[str, List[Dict]], png: str) -> List[str]:
    runs = {}
    for key in ("none", "kn"):
        rows = [r for r in groups.get(key, []) if r["training"]["valid_ppl"]]
        best = chosen(rows) or min(
            rows, key=lambda r: min(r["training"]["valid_ppl"].values()), default=None
        )
        if best is None:
            return []
        t = best["training"]
        label = key if key == "none" else f"kn gamma_0 {best['gamma']:g}"
        runs[label] = tuple(
            {int(e): p for e, p in t[s].items()} for s in ("train_ppl", "valid_ppl")
        )
    from ..analysis import plots  # matplotlib: only when drawing

    plots.curves(runs, png)
    return [
        "Figure 1 of the paper: training (dashed; kn's on noised data) and validation perplexity",
        "per epoch, unnoised against bigram Kneser-Ney noising.",
        "",
        f"![training and validation curves]({os.path.basename(png)})",
        "",
    ]


def render(records: List[Dict], table: paper.Table, out: str, command: str) -> str:
    stem = out[:-3] if out.endswith(".md") else out
    logs_dir = stem + "-logs"
    shutil.rmtree(logs_dir, ignore_errors=True)
    os.makedirs(logs_dir)
    groups: Dict[str, List[Dict]] = {}
    for rec in records:
        groups.setdefault(rec["key"], []).append(rec)
        log = os.path.join(rec["run_dir"], record.LOG)
        if os.path.isfile(log):
            shutil.copyfile(log, os.path.join(logs_dir, f"{name(rec)}.train.log"))
    lm = table.kind == "lm"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    training = [r for r in records if r["status"] == "training"]
    complete = [name(r) for r in records if record.ending(r) == "protocol"]
    hardware = sorted(
        {r["training"]["gpu"] or f"CPU ({r.get('cpus', '?')} cores)" for r in records}
    )
    budgets = sorted({r["config"]["optimization"].get("stop_time_hours") or 0 for r in records})
    walls = [r["training"]["wall_seconds"] or 0 for r in records]
    lines = [f"# {table.title}", ""]
    if training:
        lines += [f"**In progress** ({date}): {len(training)} of {len(records)} rows training.", ""]
    lines += [
        f"Written on {date} from the records of {len(records)} rows. Hardware: {', '.join(hardware)}. "
        f"Training wall time: {duration(max(walls, default=0))} for the longest row, "
        f"{duration(sum(walls))} summed over rows. Time budget per row: "
        + (", ".join(f"{b:g} h" for b in budgets if b) or "none")
        + ".",
        "Reached the end of the training protocol: "
        + (", ".join(complete) or "no row")
        + f". Figures marked {UNFINISHED} come from rows that did not (see every row below): they "
        "are no reproduction of the paper's figures.",
        "",
        "Perplexities from stateful evaluation of checkpoint_best.pt (the split read as one stream)."
        if lm
        else "Perplexity per target token on valid (fairseq-validate); BLEU: sacrebleu on "
        "detokenized test output against the raw references; tok BLEU: tokenized against tokenized.",
        "gamma_0 chosen per row on validation perplexity. " + table.note,
        "",
    ]
    main, every, signatures = [], [], set()
    for key, rows in sorted(groups.items(), key=lambda item: paper.row_order(item[0])):
        best = chosen(rows)
        figures = [NONE] * (3 if lm else 4)
        if best is not None:
            ev, mark = best["evaluation"], "" if record.ending(best) == "protocol" else UNFINISHED
            scores = (
                [ev.get("test_ppl")]
                if lm
                else [ev["bleu"]["score"], ev.get("tok_bleu", {}).get("score")]
            )
            figures = [f"{best['gamma']:g}"] + [
                fmt(v) + (mark if v is not None else "") for v in [ev["valid_ppl"], *scores]
            ]
            signatures |= {ev[k]["signature"] for k in ("bleu", "tok_bleu") if k in ev}
        main.append(
            [
                paper.row_label(key),
                *figures,
                *(
                    fmt(p).rstrip("0").rstrip(".") if p else NONE
                    for p in table.paper.get(key, (None, None))
                ),
            ]
        )
        for rec in rows:
            t, valid = rec["training"], rec.get("evaluation", {}).get("valid_ppl")
            if rec["status"] != "ended" and t["valid_ppl"]:
                valid_cell = fmt(list(t["valid_ppl"].values())[-1]) + "*"
            else:
                valid_cell = fmt(valid if rec["status"] == "ended" else None)
            halvings = NONE if t["halvings"] is None else str(t["halvings"])
            every.append(
                [
                    name(rec),
                    f"{rec['gamma']:g}",
                    valid_cell,
                    t["epochs"],
                    halvings,
                    duration(t["wall_seconds"]),
                    how(rec),
                ]
            )
    if lm:
        header = [
            "Noising scheme",
            "gamma_0",
            "Validation",
            "Test",
            "Paper validation",
            "Paper test",
        ]
    else:
        header = [
            "Row",
            "gamma_0",
            "Perplexity",
            "BLEU",
            "tok BLEU",
            "Paper perplexity",
            "Paper BLEU",
        ]
    lines += md_table(header, main)
    if signatures:
        lines += [
            "",
            "sacrebleu signatures: " + "; ".join(f"`{s}`" for s in sorted(signatures)) + ".",
        ]
    lines += [
        "",
        "Every row: validation perplexity (* fairseq's last validation, before the row's own",
        "evaluation), epochs validated, learning-rate halvings, training wall time, how it ended:",
        "",
        *md_table(
            ["row", "gamma_0", "Validation", "epochs", "halvings", "wall time", "training"], every
        ),
        "",
        f"Training logs: [`{os.path.basename(logs_dir)}/`]({os.path.basename(logs_dir)}/).",
        "",
    ]
    if lm:
        lines += _figure_1(groups, stem + "-curves.png")
    lines += [
        "## Commands",
        "",
        "Each row (it resumes from its checkpoint_last.pt when run again):",
        "",
    ]
    lines += ["    " + r["command"] for r in records]
    lines += ["", "Each row's evaluation, in its run folder:", ""]
    lines += ["    " + c for r in records for c in r.get("evaluation", {}).get("commands", [])]
    lines += ["", "This page:", "", "    " + command, ""]
    text = "\n".join(lines)
    with open(out + ".part", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(out + ".part", out)
    return text


def write(sweep_dir: str, out: Optional[str] = None, table: Optional[str] = None) -> Optional[str]:
    """Writes the page of a sweep folder (default ``SWEEP_DIR/results.md``); None without rows."""
    records = record.read_sweep(sweep_dir)
    if not records:
        return None
    out = out or os.path.join(sweep_dir, "results.md")
    table = table or next((r["table"] for r in records if r.get("table")), None)
    kind = "translation" if records[0]["config"]["task"]["_name"].endswith("translation") else "lm"
    words = ["fairseq-noise-page", sweep_dir, "--out", out] + (["--table", table] if table else [])
    render(records, paper.table(table, kind), out, shlex.join(words))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fairseq-noise-page", description=__doc__.split("\n")[0])
    parser.add_argument("sweep_dir", metavar="SWEEP_DIR", help="the sweep folder (hydra.sweep.dir)")
    parser.add_argument("--out", help="the page (default SWEEP_DIR/results.md)")
    parser.add_argument("--table", choices=sorted(paper.TABLES), help="default: the rows' table")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.sweep_dir):
        parser.error(f"SWEEP_DIR {args.sweep_dir} is not a folder")
    path = write(args.sweep_dir, args.out, args.table)
    if path is None:
        parser.error(f"SWEEP_DIR {args.sweep_dir} holds no row records (row.json)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
