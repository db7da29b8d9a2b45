"""The committed results pages (results/): every figure of a table page can be recomputed from the
records committed beside it, or the page says which figures cannot; every command on any page
runs as written from a checkout (no absolute path, none that climbs out of it, but to the real
data where the README puts it beside the checkout, ``../shared/data``).

Oracle: the page writer run again on the committed records (the figures are the records'), and
the commands' words read with shlex.
"""

import re
import shlex
from pathlib import Path

import pytest

from fairseq_noising.sweep import page, record
from fairseq_noising.sweep.page import render, tables

RESULTS = Path(__file__).resolve().parents[1] / "results"
PAGES = sorted(RESULTS.glob("**/*.md"))
TABLE_PAGES = [p for p in PAGES if "\nThis page:\n" in p.read_text(encoding="utf-8")]
UNTRACEABLE = "**Untraceable.**"
SHARED = "../shared/data/"  # the README's data beside the checkout


def md_table_lines(text):
    return [line for line in text.splitlines() if line.startswith("|")]


def command_lines(text):
    """The lines of a page's code: indented by four spaces, or inside ``` fences."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or (line.startswith("    ") and line.strip()):
            out.append(line.strip())
    return out


def test_there_are_table_pages():
    assert {p.name for p in TABLE_PAGES} >= {"ptb-small.md", "multi30k-cpu.md", "multi30k.md"}


@pytest.mark.parametrize("path", TABLE_PAGES, ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_table_pages_figures_are_its_records(path, tmp_path, monkeypatch):
    text = path.read_text(encoding="utf-8")
    rows_dir = path.with_name(path.stem + "-rows")
    if not rows_dir.is_dir():
        # a page written before rows kept their records says what cannot be recomputed
        assert UNTRACEABLE in text, f"{path} has no {rows_dir.name}/ and does not say so"
        return
    rows = record.read_sweep(str(rows_dir))
    # every entry is a row's records (but the files the page writer keeps in any folder it is
    # run on: `fairseq-noise-page PAGE-rows`, as docs/sweeps.md says, leaves them)
    entries = {p.name for p in rows_dir.iterdir()} - {page.LOCK, page.OPTIONS}
    assert sorted(r["name"] for r in rows) == sorted(entries)
    every = {line.split("|")[1].strip() for line in md_table_lines(text)}
    assert {r["name"] for r in rows} <= every  # each record is a row of the page ...
    good = [r for r in rows if r["status"] != "unreadable"]
    # ... and the page's tables are what its records give (the data of the rows is not here:
    # whether the paper's columns show is read off the page)
    monkeypatch.setattr(tables, "on_its_data", lambda spec, rows: True)
    spec = tables.spec(good[0].get("table"), good[0]["config_name"])
    written = shlex.split(text.rsplit("This page:", 1)[-1].strip().splitlines()[0])
    if "--table" in written:  # the table the page names, as the repository's configs give it
        spec = tables.from_config(
            written[written.index("--table") + 1], str(RESULTS.parent / "recipes" / "config")
        )
    show = "Paper validation" in text or "Paper perplexity" in text
    again = render.render(rows, spec, show, str(tmp_path / "page.md"), "fairseq-noise-page")
    assert md_table_lines(again) == md_table_lines(text)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(RESULTS)))
def test_commands_run_from_a_checkout(path):
    bad = []
    for line in command_lines(path.read_text(encoding="utf-8")):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # a line of a multi-line command, or not a command
            words = line.split()
        for word in words:
            value = re.sub(r"^--?[\w-]+=|^[\w.+~-]+=", "", word)
            if value.startswith(("/", "../", "~")) and not value.startswith(SHARED):
                bad.append(f"{word} in: {line[:100]}")
    assert not bad, f"{path}: " + "; ".join(bad[:5])


def test_the_page_writer_is_the_one_the_tests_read_back():
    assert page.render is render  # the page module writes through render.render
