"""The tables of a results page (:mod:`.page`): one line per row key with the paper's figures,
the seeds' means and spreads, and every row with how it trained, ended and was evaluated."""

from statistics import mean
from typing import Dict, List, Optional

from ...analysis.logs import lowered_at
from .. import record
from . import paper

UNFINISHED = "†"  # a figure of a row short of the end of its protocol
INSIDE = "‡"  # a figure of a model chosen by a validation inside an epoch
PLATEAU = "§"  # a figure of rows whose halvings all began on a plateau (``plateau_ppl``)
NONE = "—"
ENDINGS = {
    "time": "stopped by the time budget",
    "max_update": "capped by --max-update",
    "max_epoch": "capped by --max-epoch",
    "training": "training",
    "ended": "ended",
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


def ending_words(row: Dict) -> str:
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
        return f"stopped: its process is gone ({record.position_words(row)}); resumes from {at}"
    return f"{ENDINGS[ending]}, {record.position_words(row)}"


def scores(row: Dict, lm: bool) -> List[Optional[float]]:
    """Validation perplexity, then test perplexity or BLEU and tok BLEU, of an evaluated row."""
    ev = row.get("evaluation") or {}
    if lm:
        return [ev.get("valid_ppl"), ev.get("test_ppl")]
    return [
        ev.get("valid_ppl"),
        (ev.get("bleu") or {}).get("score"),
        (ev.get("tok_bleu") or {}).get("score"),
    ]


def evaluated(row: Dict) -> bool:
    return row["status"] == "ended" and (row.get("evaluation") or {}).get("valid_ppl") is not None


def picked_rows(rows: List[Dict], plateau: Optional[float] = None) -> List[Dict]:
    """The rows (one per seed) of a key's gamma_0 with the lowest mean evaluated validation
    perplexity (the first gamma_0 of equals). With the table's ``plateau_ppl``, rows whose
    halvings began on a plateau count only where no evaluated row of the key trained past one."""
    by_gamma: Dict[float, List[Dict]] = {}
    done = [r for r in rows if evaluated(r)]
    past = [r for r in done if not on_plateau(r, plateau)]
    for r in past or done:
        by_gamma.setdefault(r["gamma"], []).append(r)
    if not by_gamma:
        return []
    best = min(
        sorted(by_gamma), key=lambda g: mean(r["evaluation"]["valid_ppl"] for r in by_gamma[g])
    )
    return by_gamma[best]


def model_cell(row: Dict) -> str:
    """The validation that chose the evaluated checkpoint: ``epoch 13`` at an epoch's end,
    ``update 16800 in epoch 14 ‡`` inside one."""
    at = (row.get("evaluation") or {}).get("chosen")
    if not at or at.get("epoch") is None:
        return NONE
    if at.get("inside"):
        return f"update {at['updates']} in epoch {at['epoch']} {INSIDE}"
    return f"epoch {at['epoch']}"


def runs_cell(row: Dict) -> str:
    """``1``, or ``3 (2 resumed)``, ``2 (1 from scratch again)``; ``no record`` without one."""
    t = row.get("training") or {}
    if not t.get("recorded"):
        return "no record"
    runs = t["runs"]
    notes = [f"{runs['resumed']} resumed"] * bool(runs["resumed"])
    notes += [f"{runs['restarts']} from scratch again"] * bool(runs["restarts"])
    return f"{runs['count']} ({', '.join(notes)})" if notes else str(runs["count"])


def marks(rows: List[Dict], plateau: Optional[float] = None) -> str:
    finished = all(record.ending(r) == "protocol" for r in rows)
    inside = any(((r.get("evaluation") or {}).get("chosen") or {}).get("inside") for r in rows)
    stuck = all(on_plateau(r, plateau) for r in rows)
    return ("" if finished else UNFINISHED) + (INSIDE if inside else "") + PLATEAU * stuck


def gamma_choice(groups, seeds: bool) -> str:
    """What the main table's gamma_0 is: chosen on validation where a row key has several
    evaluated values (:func:`picked_rows`), the only one where it has not."""
    values = {
        k: sorted({r["gamma"] for r in g if evaluated(r)})
        for k, g in sorted(groups.items(), key=lambda item: paper.row_order(item[0]))
    }
    several = [
        f"{paper.row_label(k)} {', '.join(f'{g:g}' for g in v)}"
        for k, v in values.items()
        if len(v) > 1
    ]
    one = [paper.row_label(k) for k, v in values.items() if len(v) == 1 and v[0]]
    averaged = " averaged over seeds" if seeds else ""
    if not several:
        words = "One gamma_0 per row, not chosen on validation: no other value was evaluated."
    else:
        words = (
            f"gamma_0 chosen per row on validation perplexity{averaged} among the values evaluated ("
            + "; ".join(several)
            + (f"; {', '.join(one)}: one value)." if one else ").")
        )
    return words + (" The figures are the seeds' mean." if seeds else "")


def main_table(groups, table: Dict, show_paper: bool, lm: bool, seeds: bool) -> List[str]:
    """One line per row key with an evaluated or training row: the chosen gamma_0's figures
    (marked † short of the protocol, ‡ chosen inside an epoch), the seeds and their spread,
    the paper's figures."""
    main, signatures, unks = [], set(), []
    for key, group in sorted(groups.items(), key=lambda item: paper.row_order(item[0])):
        if all(r["status"] in ("failed", "unreadable") for r in group):
            continue  # said in the table of every row
        picked = picked_rows(group, table.get("plateau_ppl"))
        figures = [NONE] * (3 if lm else 4)
        if picked:
            mark = marks(picked, table.get("plateau_ppl"))
            cols = list(zip(*(scores(r, lm) for r in picked)))
            means = [mean(c) if all(v is not None for v in c) else None for c in cols]
            figures = [f"{picked[0]['gamma']:g}"] + [fmt(v) + mark * (v is not None) for v in means]
            for r in picked:
                ev = r["evaluation"]
                signatures |= {ev[k]["signature"] for k in ("bleu", "tok_bleu") if k in ev}
                if (ev.get("unk") or {}).get("tokens"):
                    u = ev["unk"]
                    unks.append(f"{r['name']} {u['tokens']} in {u['sentences']} of {u['of']}")
        cells = [paper.row_label(key), *figures]
        if seeds:
            spread = [s[1] for s in (scores(r, lm) for r in picked) if s[1] is not None]
            cells += [len(picked), fmt(max(spread) - min(spread)) if len(spread) > 1 else NONE]
        if show_paper:
            cells += [
                _paper_cell(p) for p in table["paper"].get(paper.paper_key(key), [None, None])
            ]
        main.append(cells)
    header = ["Noising scheme" if lm else "Row", "gamma_0", "Validation", *score_names(lm)]
    header += ["seeds", f"{'Test' if lm else 'BLEU'} spread"] if seeds else []
    if show_paper:
        header += ["Paper validation", "Paper test"] if lm else ["Paper perplexity", "Paper BLEU"]
    lines = md_table(header, main)
    if signatures:
        signed = "; ".join(f"`{s}`" for s in sorted(signatures))
        lines += ["", f"sacrebleu signatures: {signed}."]
    if unks:
        lines += [
            "",
            "`<unk>` in the test output (tokens in sentences), scored as they are (sacrebleu's "
            "13a makes three tokens of each): " + "; ".join(unks) + ".",
        ]
    return lines + plateau_lines(groups, table.get("plateau_ppl"))


def plateau_lines(groups, plateau: Optional[float]) -> List[str]:
    """The rows :func:`picked_rows` leaves out for their plateau, and what § means where a key's
    figures come only from such rows."""
    if not plateau:
        return []
    out, marked = [], False
    for group in groups.values():
        picked = picked_rows(group, plateau)
        marked |= bool(picked) and all(on_plateau(r, plateau) for r in picked)
        out += [
            r["name"] for r in group if evaluated(r) and on_plateau(r, plateau) and r not in picked
        ]
    why = (
        f"whose halvings began on a plateau (validation perplexity above {plateau:g} at the first "
        "halving: the model had not begun to use its source)"
    )
    lines = []
    if out:
        lines += [
            "",
            f"Left out of the figures above and of the means over seeds: {', '.join(sorted(out))}, "
            f"{why}; their figures are in the table of every row.",
        ]
    if marked:
        lines += ["", f"Figures marked {PLATEAU} come only from rows {why}."]
    return lines


def seeds_table(groups, lm: bool, plateau: Optional[float] = None) -> List[str]:
    """For a table with seeds: per row key, the chosen gamma_0's seeds, each figure's mean and
    spread (max - min; none for one seed), and the difference to none against both spreads."""
    stats = {}
    for key, group in groups.items():
        picked = picked_rows(group, plateau)
        if picked:
            cols = list(zip(*(scores(r, lm)[:2] for r in picked)))
            spread = (lambda c: max(c) - min(c)) if len(picked) > 1 else (lambda c: None)
            stats[key] = [(mean(c), spread(c)) if None not in c else None for c in cols]
            stats[key].append(len(picked))
    if "none" not in stats or len(stats) < 2:
        return []
    name = "Test" if lm else "BLEU"
    header = ["Row", "seeds", "Validation mean", "spread", f"{name} mean", "spread"]
    header += [f"{name} - none", "none's spread", "beyond both spreads"]
    lines = []
    for key in sorted(stats, key=paper.row_order):
        (v, vs), test, n = stats[key][0], stats[key][1], stats[key][2]
        cells = [paper.row_label(key), n, fmt(v), fmt(vs)]
        cells += [fmt(test[0]), fmt(test[1])] if test else [NONE, NONE]
        base = stats["none"][1]
        if key == "none" or not test or not base:
            cells += [NONE] * 3
        else:
            diff = test[0] - base[0]
            known = [s for s in (test[1], base[1]) if s is not None]
            single = " (one seed)" if test[1] is None else " (none: one seed)" * (base[1] is None)
            beyond = ("yes" if known and abs(diff) > max(known) else "no") + single
            cells += [f"{diff:+.2f}", fmt(base[1]), beyond if known else NONE]
        lines.append(cells)
    return [
        "Over seeds (the chosen gamma_0 of each row; spread: largest minus smallest; a",
        "difference is beyond both spreads when it is larger than the row's and none's):",
        "",
        *md_table(header, lines),
    ]


def score_names(lm: bool) -> List[str]:
    return ["Test"] if lm else ["BLEU", "tok BLEU"]


def _row_cells(
    row: Dict, lm: bool, seeds: bool, precisions: bool, plateau: Optional[float] = None
) -> List[object]:
    t = row.get("training") or {}
    figures = scores(row, lm) if evaluated(row) else [None] * (2 if lm else 3)
    if not evaluated(row) and t.get("last_valid_ppl") is not None:
        valid = fmt(t["last_valid_ppl"]) + "*"
    else:
        valid = fmt(figures[0])
    halvings = NONE if t.get("halvings") is None else str(t["halvings"])
    cells = [row["name"], f"{row.get('gamma', 0):g}"] + ([str(row.get("seed"))] if seeds else [])
    cells += [row.get("precision", "fp32")] * precisions
    cells += [valid, *(fmt(s) for s in figures[1:]), model_cell(row), t.get("epochs", NONE)]
    cells += [halvings, duration(t.get("training_seconds")), duration(t.get("wall_seconds"))]
    return cells + [runs_cell(row), ending_words(row) + plateau_words(row, plateau)]


def first_halving(row: Dict) -> Optional[tuple]:
    """(epoch, validation perplexity) of the epoch after which the rate first halved, from the
    rates each epoch trained at; None before any halving."""
    t = row.get("training") or {}
    lowered = lowered_at({int(e): lr for e, lr in (t.get("train_lr") or {}).items()})
    if not lowered:
        return None
    epoch = lowered[0] - 1
    return epoch, (t.get("valid_ppl") or {}).get(str(epoch))


def on_plateau(row: Dict, plateau: Optional[float]) -> bool:
    """Whether the row's rate first halved while its validation perplexity was above the table's
    ``plateau_ppl`` (a translation model that had not begun to use its source yet)."""
    halving = first_halving(row) if plateau else None
    return bool(halving) and halving[1] is not None and halving[1] > plateau


def plateau_words(row: Dict, plateau: Optional[float]) -> str:
    """``; halvings began on a plateau ...`` for a row :func:`on_plateau`; nothing otherwise."""
    if not on_plateau(row, plateau):
        return ""
    epoch, valid = first_halving(row)
    return (
        f"; halvings began on a plateau: valid {fmt(valid)} after epoch {epoch}, above {plateau:g}"
    )


def every_table(
    rows: List[Dict], lm: bool, seeds: bool, plateau: Optional[float] = None
) -> List[str]:
    precisions = len({r.get("precision", "fp32") for r in rows}) > 1
    header = ["row", "gamma_0"] + ["seed"] * seeds + ["precision"] * precisions
    header += ["Validation", *score_names(lm)]
    header += ["model", "epochs", "halvings", "training time", "wall time", "processes"]
    header += ["training"]
    cells = [
        _row_cells(r, lm, seeds, precisions, plateau)
        if r["status"] != "unreadable"
        else [r["name"]] + [NONE] * (len(header) - 2) + [ending_words(r)]
        for r in rows
    ]
    return [
        "Every row: validation perplexity (* fairseq's last validation, before the row's own",
        "evaluation), the validation that chose the evaluated model (‡ inside an epoch), epochs",
        "validated, learning-rate halvings, training time (fairseq's clock, summed over the",
        "processes up to the last save), wall time (from the first start to the last record),",
        "the processes that trained it, how it ended:",
        "",
        *md_table(header, cells),
    ]


def stops(rows: List[Dict]) -> List[str]:
    """Each stop and resume of each row, from its progress file."""
    import datetime

    def at(seconds: float) -> str:
        utc = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
        return utc.strftime("%Y-%m-%d %H:%M UTC")

    lines = []
    for row in rows:
        runs = ((row.get("training") or {}).get("runs") or {}).get("list") or []
        for before, after in zip(runs, runs[1:]):
            how_ = "stopped" if before["ended"] is None else f"ended ({before['status']})"
            to = after["from"]["where"] if after["from"] else "scratch, starting again"
            lines.append(
                f"- {row['name']}: {how_} {at(before['last'])}; resumed "
                f"{at(after['started'])} from {to}."
            )
    return ["Stops and resumes:", "", *lines, ""] if lines else []


def _paper_cell(value) -> str:
    return NONE if value is None else fmt(float(value)).rstrip("0").rstrip(".")
