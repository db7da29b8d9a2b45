"""A sweep's results page (fairseq_noising/sweep/page/) from rows written here by hand, as
:func:`fairseq_noising.sweep.record.read` gives them (tests/test_sweep_rows.py tests that).

Oracles: the cells worked out by hand in this file from those rows (gamma_0 the lowest mean
evaluated validation perplexity among a row key's ended rows, the first of equals; the paper's
row order as the scheme registry lists it, its figures as the table's options here give them),
the same sweep's page without a failed row, and the logs as written here. The page's Markdown
tables are read back cell by cell.
"""

import os
import re
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import pytest

from fairseq_noising import analysis
from fairseq_noising.sweep import page, record
from fairseq_noising.sweep.page import tables

STARTED, ENDED = "2026-11-25 01:53:48 UTC", "2026-11-25 02:53:48 UTC"
SPLITS = ("valid", "test")
OOM = "RuntimeError: CUDA out of memory"
SIG = "nrefs:1|case:mixed|eff:no|tok:{}|smooth:exp|version:2.6.0"  # sacrebleu's, as recorded
PTB_LINES = 42068  # PTB's training sentences, as the table names its data
# the tables' options as a row's .hydra/hydra.yaml holds them (recipes/config)
PTB_MEDIUM = {
    "title": "Penn Treebank, medium model (paper Table 2)",
    "note": "The paper's rows: none = dropout only.",
    "data": {"name": "Penn Treebank (Mikolov's split)", "train_sentences": PTB_LINES},
    "paper": {
        "none": [84.3, 80.4],
        "blank": [82.7, 78.8],
        "unigram": [83.1, 80.1],
        "kn": [79.9, 76.9],
    },
}
IWSLT_TABLE_4 = {
    "none": [8.84, 24.6],
    "blank": [8.28, 25.3],
    "unigram": [8.15, 25.5],
    "kn": [7.92, 26.0],
    "kn:source": [8.74, 24.8],
    "kn:target": [8.14, 25.6],
}
MULTI30K = {
    "title": "Multi30k En-De, the paper's LSTM",
    "note": "The paper's columns are its IWSLT'15 En-De figures (Table 4), another corpus.",
    "data": {"name": "Multi30k", "train_sentences": 29000},
    "paper": IWSLT_TABLE_4,
}


def make_row(
    key, gamma, status="ended", evaluation=None, error=None, translation=False, seed=1, **got
):
    """A row as :func:`record.read` gives it: an LM row of ptb_medium (paper_halving, 8
    halvings, all done) or a translation row of multi30k (fixed rate, stopped by patience);
    ``got``: fields of its ``training`` (how far it got) other than those."""
    scheme, _, side = key.partition(":")
    task = {"_name": "noised_language_modeling", "data": "data-bin/ptb", "noise_scheme": scheme}
    scheduler = {"_name": "paper_halving", "halvings": 8, "halving_threshold": None}
    if translation:
        task.update(_name="noised_translation", data="data-bin/m30k", noise_side=side or "both")
        scheduler = {"_name": "fixed"}
    task["noise_gamma"] = gamma
    halvings = None if translation else 8
    training = dict(epochs=6, epochs_done=6.0, valid_ppl={}, train_ppl={}, halvings=halvings)
    training.update(max_halvings=halvings, lr=0.00390625, resume_at="the end of epoch 6")
    training.update(stop="patience" if translation else "halvings", training_seconds=600.0)
    training.update(wall_seconds=660.0, recorded=True, runs=one_run())
    training.update(got)
    seen = list(training["valid_ppl"].values())
    training.setdefault("last_valid_ppl", seen[-1] if seen else None)
    config_name = "multi30k" if translation else "ptb_medium"
    override = f"task={{noise_scheme:{scheme},noise_side:{side or 'both'},noise_gamma:{gamma:g}}}"
    name = f"{scheme}-{side or 'both'}-g{gamma:g}" if translation else f"{scheme}-g{gamma:g}"
    name += f"-s{seed}" if seed != 1 else ""
    row = {
        "name": name,
        "run_dir": f"/runs/{name}",
        "format": 2,
        "config_name": config_name,
        "config_dir": "/repo/recipes/config",
        "cwd": "/repo",
        "table": MULTI30K if translation else PTB_MEDIUM,
        "command": f"fairseq-hydra-train -m --config-name {config_name} '{override}'",
        "key": key,
        "gamma": float(gamma),
        "seed": seed,
        "status": status,
        "started": STARTED,
        "process": {"host": "h", "pid": 1, "cpus": 2},
        "gpu": None,
        "training": training,
        "config": {
            "task": task,
            "common": {"seed": seed},
            "optimization": {"max_epoch": 40, "stop_time_hours": 0.0 if translation else 2.0},
            "lr_scheduler": scheduler,
            "checkpoint": {"patience": 3},
        },
    }
    if status != "training":
        row["ended"] = ENDED
    if evaluation is not None:
        row["evaluation"] = evaluation
    if error is not None:
        row["error"] = error
    return row


AT_6 = {"epoch": 6, "updates": 600, "inside": False, "where": "the end of epoch 6"}


def one_run(started=1000.0, last=1660.0):
    """The processes of a row that one process trained from scratch to its end."""
    run = {"started": started, "last": last, "ended": last, "status": "completed", "from": None}
    return {
        "count": 1,
        "resumed": 0,
        "restarts": 0,
        "stops": [],
        "wall_seconds": last - started,
        "list": [dict(run, validations=[], dropped=False)],
    }


def ended_lm(key, gamma, valid, test, fairseq_valid, seed=1):
    """An LM row that ended: evaluated valid and test perplexity, fairseq's last validation."""
    commands = [f"fairseq-eval-lm data-bin/ptb --gen-subset {s}" for s in SPLITS]
    evaluation = {"commands": commands, "valid_ppl": valid, "test_ppl": test, "chosen": AT_6}
    curves = dict(valid_ppl={"5": fairseq_valid + 3, "6": fairseq_valid}, train_ppl={"6": 80.0})
    return make_row(key, gamma, evaluation=evaluation, seed=seed, **curves)


def ended_mt(key, gamma, valid, bleu, tok_bleu=None, seed=1):
    evaluation = {"commands": ["fairseq-validate data-bin/m30k"], "chosen": AT_6}
    evaluation.update(valid_ppl=valid, bleu={"score": bleu, "signature": SIG.format("13a")})
    if tok_bleu is not None:  # only with a tokenized reference
        evaluation["tok_bleu"] = {"score": tok_bleu, "signature": SIG.format("none")}
    return make_row(
        key, gamma, evaluation=evaluation, translation=True, seed=seed, valid_ppl={"6": 9.0}
    )


@pytest.fixture
def sweep_of(tmp_path, monkeypatch):
    """A sweep folder whose rows are the given rows (record.read_sweep stands in for reading
    them), its data of ``sentences`` training sentences; returns the page written, read back."""

    def write(rows, sentences=PTB_LINES, logs=(), **kwargs):
        root = tmp_path / "sweep"
        root.mkdir(exist_ok=True)
        rows = [dict(r, run_dir=str(root / r["name"])) for r in rows]
        for r in rows:
            os.makedirs(r["run_dir"], exist_ok=True)
            if r["name"] in logs:
                Path(r["run_dir"], "hydra_train.log").write_text(f"{r['name']}'s log\n")
        monkeypatch.setattr(record, "read_sweep", lambda sweep_dir: rows)
        monkeypatch.setattr(tables, "train_sentences", lambda cfg, cwd: sentences)
        return read_page(page.write(str(root), **kwargs))

    return write


def lm_rows():
    """The LM sweep: fairseq's last validations order the kn and blank rows otherwise than
    their evaluations do; none stopped by the time budget; unigram 0.1 failed; kn 0.4 training."""
    none = ended_lm("none", 0, 130.0, 126.0, 131.0)
    none["training"].update(stop="time", epochs=5, epochs_done=5.5, halvings=2, lr=0.25)
    kn_halved = ended_lm("kn", 0.2, 110.0, 104.5, 112.0)
    # rates per epoch as the record holds them: halved before epochs 3 and 5
    kn_halved["training"]["train_lr"] = {"1": 1.0, "2": 1.0, "3": 0.5, "4": 0.5, "5": 0.25}
    return [
        ended_lm("blank", 0.1, 100.0, 95.5, 101.0),
        ended_lm("blank", 0.2, 100.0, 97.25, 99.0),
        ended_lm("kn", 0.1, 120.0, 116.0, 105.0),
        kn_halved,
        ended_lm("kn", 0.3, 115.0, 109.0, 118.0),
        make_row(
            "kn", 0.4, "training", epochs=2, epochs_done=2.25, halvings=0, lr=1.0,
            valid_ppl={"1": 95.0, "2": 90.0}, stop=None,
        ),
        none,
        make_row("unigram", 0.1, "failed", error=OOM, valid_ppl={"1": 80.0}, stop=None),
        ended_lm("unigram", 0.2, 105.0, 101.0, 106.0),
    ]  # fmt: skip


LM_HEADER = ["Noising scheme", "gamma_0", "Validation", "Test", "Paper validation", "Paper test"]
# none stopped by the time budget (†); blank: the first of equals; kn: 110 of 120, 110, 115
LM_MAIN = [
    ["none", "0", "130.00†", "126.00†", "84.3", "80.4"],
    ["blank", "0.1", "100.00", "95.50", "82.7", "78.8"],
    ["unigram", "0.2", "105.00", "101.00", "83.1", "80.1"],
    ["bigram Kneser-Ney", "0.2", "110.00", "104.50", "79.9", "76.9"],
]
Page = namedtuple("Page", "text main every")


def md_tables(text):
    """The Markdown tables of a page, each a list of rows of cells (the header first)."""
    tables, current = [], None
    for line in text.split("\n"):
        if not line.startswith("|"):
            current = None
            continue
        if current is None:
            current = []
            tables.append(current)
        if set(line) - set("|-"):  # not the rule under the header
            split = re.split(r"(?<!\\)\|", line)[1:-1]  # at the pipes not escaped
            current.append([cell.strip().replace("\\|", "|") for cell in split])
    return tables


def read_page(path):
    text = Path(path).read_text(encoding="utf-8")
    found = md_tables(text)
    return Page(text, found[0], found[-1])


def cells(table, row):
    """The cells after the first of the row whose first cell is ``row``."""
    return next(r[1:] for r in table if r[0] == row)


@pytest.fixture(autouse=True)
def drawn(monkeypatch):
    """Figure 1's drawings, recorded instead of drawn (no matplotlib)."""
    calls = []
    fake = SimpleNamespace(curves=lambda runs, png, halved: calls.append((runs, png, halved)))
    monkeypatch.setattr(analysis, "plots", fake, raising=False)
    return calls


@pytest.fixture
def lm_page(sweep_of):
    return sweep_of(lm_rows(), logs=["kn-g0.4"])


def test_gamma0_is_the_lowest_evaluated_validation_of_ended_rows(lm_page, drawn):
    # kn: 0.2 (110 of 120, 110, 115), not 0.4 training (fairseq's 90) nor 0.1 (fairseq's 105);
    # blank: 0.1, the first of two 100s; unigram: 0.2, not 0.1 that failed (fairseq's 80)
    assert lm_page.main == [LM_HEADER, *LM_MAIN]
    # Figure 1 draws the chosen rows' curves: none's and kn 0.2's
    [(runs, png, halved)] = drawn
    assert list(runs) == ["none", "kn gamma_0 0.2"]
    assert runs["kn gamma_0 0.2"] == ({6: 80.0}, {5: 115.0, 6: 112.0})
    # the first epoch at each halved rate, from the rates per epoch (none has none recorded)
    assert halved == {"none": [], "kn gamma_0 0.2": [3, 5]}
    assert "![training and validation curves](results-curves.png)" in lm_page.text


def test_the_page_says_among_which_gamma0_each_row_was_chosen(lm_page, sweep_of):
    # evaluated values only: kn 0.4 is training, unigram 0.1 failed; none's 0 is no choice
    assert (
        "gamma_0 chosen per row on validation perplexity among the values evaluated (blank 0.1,"
        " 0.2; bigram Kneser-Ney 0.1, 0.2, 0.3; unigram: one value)." in lm_page.text
    )
    one_each = [
        ended_lm("none", 0, 130.0, 126.0, 131.0),
        ended_lm("kn", 0.2, 110.0, 104.5, 112.0),
        ended_lm("kn", 0.2, 111.0, 105.5, 112.0, seed=2),
        make_row("blank", 0.1, "training", epochs=2, valid_ppl={"1": 95.0}, stop=None),
    ]
    text = sweep_of(one_each).text
    assert "One gamma_0 per row, not chosen on validation: no other value was evaluated." in text
    assert "The figures are the seeds' mean." in text and "chosen per row" not in text


def test_rows_in_the_papers_order_with_the_registry_labels(lm_page):
    assert [r[0] for r in lm_page.main[1:]] == ["none", "blank", "unigram", "bigram Kneser-Ney"]
    assert [r[0] for r in lm_page.every[1:]] == [
        "blank-g0.1",
        "blank-g0.2",
        "kn-g0.1",
        "kn-g0.2",
        "kn-g0.3",
        "kn-g0.4",
        "none-g0",
        "unigram-g0.1",
        "unigram-g0.2",
    ]


def test_a_row_still_training_shows_fairseqs_validation_and_where_it_is(lm_page):
    assert re.search(
        r"^\*\*In progress\*\* \([^)]+\): of 9 rows, 1 training\.$", lm_page.text, re.M
    )
    # fairseq's last validation (epoch 2); a quarter of epoch 3, lr 1; no halving yet
    where = "training, epoch 3 (25% of it), lr 1, 0 of 8 halvings"
    training = ["0.4", "90.00*", "—", "—", "2", "0", "10 min", "11 min", "1", where]
    assert cells(lm_page.every, "kn-g0.4") == training
    ended = ["0.2", "110.00", "104.50", "epoch 6", "6", "8", "10 min", "11 min", "1"]
    ended.append("end of the protocol (epoch 6, all 8 halvings)")
    assert cells(lm_page.every, "kn-g0.2") == ended


def test_a_row_whose_process_is_gone_shows_where_it_stopped(sweep_of):
    stopped = make_row(
        "kn", 0.4, "stopped", epochs=2, epochs_done=2.25, halvings=0, lr=1.0, stop=None,
        valid_ppl={"2": 90.0}, resume_at="update 90 inside epoch 3",
    )  # fmt: skip
    got = sweep_of([ended_lm("none", 0, 130.0, 126.0, 131.0), stopped])
    # nothing runs: the page says so, not "in progress"
    stopped_line = (
        r"^\*\*Stopped\*\* \([^)]+\): of 2 rows, 1 stopped before their end and no process runs "
        r"them; the sweep's command run again resumes them\.$"
    )
    assert re.search(stopped_line, got.text, re.M) and "In progress" not in got.text
    how = "stopped: its process is gone (epoch 3 (25% of it), lr 1, 0 of 8 halvings); resumes from update 90 inside epoch 3"
    assert cells(got.every, "kn-g0.4")[-1] == how
    assert f"\n    {stopped['command']}\n" in got.text  # the command that resumes it


def test_figures_of_rows_short_of_the_protocol_are_marked(lm_page):
    # none stopped by the time budget: its figures are marked †, kn's (8 halvings done) are not
    assert cells(lm_page.main, "none")[1:3] == ["130.00†", "126.00†"]
    assert cells(lm_page.main, "bigram Kneser-Ney")[1:3] == ["110.00", "104.50"]
    where = "stopped by the time budget, epoch 6 (50% of it), lr 0.25, 2 of 8 halvings"
    assert cells(lm_page.every, "none-g0")[-1] == where
    reached = re.search(r"Reached the end of the training protocol: (.*?)\. Figures", lm_page.text)
    assert reached.group(1).split(", ") == [
        "blank-g0.1",
        "blank-g0.2",
        "kn-g0.1",
        "kn-g0.2",
        "kn-g0.3",
        "unigram-g0.2",
    ]
    assert "Time budget per row: 2 h." in lm_page.text


def test_an_epoch_count_is_a_cap_not_the_protocol(sweep_of):
    capped = ended_mt("none", 0, 10.0, 28.0)
    capped["training"].update(stop="max_epoch", epochs=10, epochs_done=10.0, halvings=None)
    got = sweep_of([capped, ended_mt("kn", 0.2, 9.1, 31.25)], sentences=29000)
    assert cells(got.main, "none")[1:4] == ["10.00†", "28.00†", "—"]
    assert (
        cells(got.every, "none-both-g0")[-1]
        == "capped by --max-epoch, after epoch 10, lr 0.00390625"
    )
    assert cells(got.main, "bigram Kneser-Ney")[1:3] == ["9.10", "31.25"]


def test_the_hardware_names_the_gpu_and_whether_mps_served_it(sweep_of):
    rows = [ended_mt("none", 0, 10.0, 28.0), ended_mt("kn", 0.2, 9.1, 31.25)]
    for row in rows:
        row.update(gpu="NVIDIA H100 80GB HBM3", mps=True)
    assert "Hardware: NVIDIA H100 80GB HBM3 (MPS)." in sweep_of(rows, sentences=29000).text
    rows[1]["mps"] = False
    got = sweep_of(rows, sentences=29000).text
    assert "Hardware: NVIDIA H100 80GB HBM3 (MPS), NVIDIA H100 80GB HBM3 (no MPS)." in got
    assert "Hardware: CPU (2 cores)." in sweep_of([ended_mt("none", 0, 10.0, 28.0)]).text


def test_the_hardware_names_each_cpu_the_rows_trained_on(sweep_of):
    """Rows that trained on two machines: each CPU's model once; a record from before the
    model was kept says the cores alone."""
    rows = [ended_mt(k, g, 10.0, 28.0, seed=s) for k, g, s in (("none", 0, 1), ("kn", 0.2, 1))]
    rows += [ended_mt("none", 0, 10.0, 28.0, seed=2)]
    rows[0]["process"]["cpu"] = "AMD EPYC"
    rows[1]["process"] = {"host": "h", "pid": 2, "cpus": 2, "cpu": "Intel(R) Xeon(R) Processor"}
    got = sweep_of(rows, sentences=29000).text
    assert (
        "Hardware: CPU (2 cores), CPU (AMD EPYC, 2 cores), "
        "CPU (Intel(R) Xeon(R) Processor, 2 cores)." in got
    )


def test_a_failed_row_is_listed_and_leaves_the_other_rows_alone(sweep_of, lm_page):
    assert cells(lm_page.every, "unigram-g0.1")[0] == "0.1"
    assert cells(lm_page.every, "unigram-g0.1")[-1] == f"FAILED ({OOM})"
    rows = [r for r in lm_rows() if r["name"] != "unigram-g0.1"]
    without = sweep_of(rows, logs=["kn-g0.4"])
    assert lm_page.main == without.main
    assert [r for r in lm_page.every if r[0] != "unigram-g0.1"] == without.every


def test_a_row_of_an_unknown_scheme_has_its_line_and_the_others_their_figures(sweep_of):
    error = "ValidationError: task.noise_scheme: Invalid value 'bogus', expected one of [none, kn]"
    bogus = make_row("bogus", 0.2, "failed", error=error, epochs=0, valid_ppl={}, stop=None)
    got = sweep_of([ended_lm("none", 0, 130.0, 126.0, 131.0), bogus])
    assert cells(got.main, "none")[:3] == ["0", "130.00", "126.00"]
    assert "bogus" not in [r[0] for r in got.main]  # no line of figures for a failed row
    assert cells(got.every, "bogus-g0.2")[-1] == f"FAILED ({error})"


def test_an_unreadable_row_has_its_line(sweep_of):
    broken = {"name": "kn-g0.2", "run_dir": "/runs/kn-g0.2", "status": "unreadable"}
    broken["error"] = "/runs/kn-g0.2/.hydra holds no readable config"
    got = sweep_of([ended_lm("none", 0, 130.0, 126.0, 131.0), broken])
    assert cells(got.every, "kn-g0.2")[-1] == f"UNREADABLE ({broken['error']})"
    assert cells(got.main, "none")[:3] == ["0", "130.00", "126.00"]


def test_seeds_are_averaged_and_their_spread_shown(sweep_of, drawn):
    rows = [
        ended_lm("none", 0, 130.0, 126.0, 131.0),
        ended_lm("none", 0, 132.0, 129.0, 133.0, seed=2),
        ended_lm("kn", 0.2, 110.0, 104.5, 112.0),
        ended_lm("kn", 0.2, 111.0, 105.5, 112.0, seed=2),
        ended_lm("kn", 0.4, 109.0, 108.0, 112.0),  # better than 0.2's mean (110.5), one seed
    ]
    got = sweep_of(rows)
    assert got.main[0] == [
        "Noising scheme",
        "gamma_0",
        "Validation",
        "Test",
        "seeds",
        "Test spread",
        "Paper validation",
        "Paper test",
    ]
    assert cells(got.main, "none") == ["0", "131.00", "127.50", "2", "3.00", "84.3", "80.4"]
    assert cells(got.main, "bigram Kneser-Ney") == [
        "0.4",
        "109.00",
        "108.00",
        "1",
        "—",
        "79.9",
        "76.9",
    ]
    assert cells(got.every, "kn-g0.2-s2")[:5] == ["0.2", "2", "111.00", "105.50", "epoch 6"]
    # over seeds: means and spreads by hand; kn's test (108, one seed: no spread of its own)
    # minus none's (127.5) is beyond none's spread (3)
    over = md_tables(got.text)[1]
    assert over[0][-3:] == ["Test - none", "none's spread", "beyond both spreads"]
    assert cells(over, "none") == ["2", "131.00", "2.00", "127.50", "3.00", "—", "—", "—"]
    kn = ["1", "109.00", "—", "108.00", "—", "-19.50", "3.00", "yes (one seed)"]
    assert cells(over, "bigram Kneser-Ney") == kn
    # Figure 1 draws every seed of the chosen gamma_0, each its own curves
    [(runs, png, halved)] = drawn
    assert list(runs) == ["none seed 1", "none seed 2", "kn gamma_0 0.4"]
    assert [runs[k][1] for k in runs] == [
        {5: 134.0, 6: 131.0},
        {5: 136.0, 6: 133.0},
        {5: 115.0, 6: 112.0},
    ]
    assert "every seed of the gamma_0 in the table" in got.text


def test_a_difference_to_a_none_of_one_seed_says_so(sweep_of):
    """none of one seed has no spread: the difference is judged against the row's own alone,
    and the page says whose seed is missing."""
    rows = [
        ended_lm("none", 0, 130.0, 126.0, 131.0),
        ended_lm("kn", 0.2, 110.0, 104.0, 112.0),
        ended_lm("kn", 0.2, 111.0, 106.0, 112.0, seed=2),
    ]
    over = md_tables(sweep_of(rows).text)[1]
    kn = ["2", "110.50", "1.00", "105.00", "2.00", "-21.00", "—", "yes (none: one seed)"]
    assert cells(over, "bigram Kneser-Ney") == kn


def test_a_pipe_in_an_error_line_stays_in_its_cell(sweep_of):
    # an evaluation killed by the system: its error ends with fairseq's last line, a log line
    error = (
        "evaluation: fairseq-eval-lm failed (exit -9): 2026-11-25 01:54:10 | INFO | "
        "fairseq.data.data_utils | loaded 3,370 examples from: data-bin/ptb/test"
    )
    rows = [ended_lm("kn", 0.2, 110.0, 104.5, 112.0), make_row("kn", 0.3, "failed", error=error)]
    every = sweep_of(rows).every
    failed = ["0.3", "—", "—", "—", "6", "8", "10 min", "11 min", "1", f"FAILED ({error})"]
    assert cells(every, "kn-g0.3") == failed


def test_translation_page_has_bleu_signatures_and_the_iwslt_figures(sweep_of, drawn):
    rows = [
        ended_mt("kn:target", 0.2, 9.5, 30.1, 31.4),
        ended_mt("kn:source", 0.1, 9.8, 29.0, 30.2),
        ended_mt("kn", 0.2, 9.1, 31.25),  # no tokenized reference: no tok BLEU
        ended_mt("none", 0, 10.0, 28.0, 29.5),
        ended_mt("kn", 0.4, 9.3, 32.0, 33.0),  # the best BLEU, not the best perplexity
    ]
    got = sweep_of(rows, sentences=29000)
    header = ["Row", "gamma_0", "Validation", "BLEU", "tok BLEU"]
    # Table 4 of the paper (IWSLT'15): perplexity, BLEU
    assert got.main == [
        header + ["Paper perplexity", "Paper BLEU"],
        ["none", "0", "10.00", "28.00", "29.50", "8.84", "24.6"],
        ["bigram Kneser-Ney", "0.2", "9.10", "31.25", "—", "7.92", "26"],
        ["bigram Kneser-Ney, source only", "0.1", "9.80", "29.00", "30.20", "8.74", "24.8"],
        ["bigram Kneser-Ney, target only", "0.2", "9.50", "30.10", "31.40", "8.14", "25.6"],
    ]
    signatures = f"sacrebleu signatures: `{SIG.format('13a')}`; `{SIG.format('none')}`."
    assert signatures in got.text.split("\n")
    assert got.text.startswith("# Multi30k En-De, the paper's LSTM\n")
    assert "IWSLT'15 En-De figures (Table 4), another corpus" in got.text
    # a fixed learning rate stopped by patience: the protocol's end, no halvings
    assert {tuple(r[7:]) for r in got.every[1:]} == {
        ("—", "10 min", "11 min", "1", "end of the protocol (epoch 6, patience)")
    }
    # the translation figure: none against kn on both sides, kn's gamma_0 the chosen one
    [(runs, png, halved)] = drawn
    assert list(runs) == ["none", "kn gamma_0 0.2"] and png.endswith("results-curves.png")
    assert "As the paper's Figure 1, for translation" in got.text
    assert "bigram Kneser-Ney noising on both sides" in got.text


def test_a_page_for_other_data_names_it_and_leaves_the_paper_out(sweep_of):
    rows = [ended_lm("none", 0, 130.0, 126.0, 131.0), ended_lm("kn", 0.2, 110.0, 104.5, 112.0)]
    got = sweep_of(rows, sentences=300)  # not PTB's 42068 training sentences
    assert got.text.startswith("# ptb_medium on data-bin/ptb\n")
    assert got.main[0] == ["Noising scheme", "gamma_0", "Validation", "Test"]
    assert "Penn Treebank" not in got.text and "paper validation" not in got.text.lower()
    assert "The paper's figures are left out" in got.text and "Data: `data-bin/ptb`." in got.text
    # asked for: the paper's columns; a title of the user's
    asked = sweep_of(rows, sentences=300, show_paper=True, title="My corpus, small model")
    assert asked.text.startswith("# My corpus, small model\n")
    assert asked.main[0][-2:] == ["Paper validation", "Paper test"]
    # on the paper's data: the table's title, note and columns
    own = sweep_of(rows)
    assert own.text.startswith("# Penn Treebank, medium model (paper Table 2)\n")
    assert "(Penn Treebank (Mikolov's split))" in own.text and PTB_MEDIUM["note"] in own.text
    assert own.main[0][-2:] == ["Paper validation", "Paper test"]


def test_commands_name_no_absolute_path(sweep_of):
    got = sweep_of([ended_lm("kn", 0.2, 110.0, 104.5, 112.0)])
    commands = [line[4:] for line in got.text.split("\n") if line.startswith("    ")]
    assert commands and all(not w.startswith("/") for c in commands for w in c.split())


def test_cli_writes_the_page_and_copies_each_rows_files(tmp_path, monkeypatch, capsys):
    rows = [ended_lm("kn", 0.2, 110.0, 104.5, 112.0), make_row("kn", 0.4, "training", stop=None)]
    sweep = tmp_path / "sweep"
    rows = [dict(r, run_dir=str(sweep / r["name"])) for r in rows]
    for r in rows:
        os.makedirs(Path(r["run_dir"], ".hydra"))
        for name in ("hydra_train.log", "progress.jsonl", ".hydra/config.yaml", "eval.log"):
            Path(r["run_dir"], name).write_text(f"{r['name']}'s {name}")
        Path(r["run_dir"], "checkpoint_best.pt").write_text("no checkpoint beside a page")
    monkeypatch.setattr(record, "read_sweep", lambda sweep_dir: rows)
    monkeypatch.setattr(tables, "train_sentences", lambda cfg, cwd: PTB_LINES)
    kept = tmp_path / "page-rows"
    kept.mkdir()
    (kept / "stale").mkdir()
    out = tmp_path / "page.md"
    assert page.main([str(sweep), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert sorted(os.listdir(kept)) == ["kn-g0.2", "kn-g0.4"]  # an earlier page's are gone
    for n in os.listdir(kept):
        for name in ("hydra_train.log", "progress.jsonl", ".hydra/config.yaml", "eval.log"):
            assert (kept / n / name).read_text() == f"{n}'s {name}"
        assert not (kept / n / "checkpoint_best.pt").exists()
    text = read_page(out).text
    assert text.startswith("# Penn Treebank, medium model (paper Table 2)\n")
    link = "Each row's record, progress, evaluation output and training log: [`page-rows/`](page-rows/)."
    assert link in text
    commands = [r["command"] for r in rows] + rows[0]["evaluation"]["commands"]
    assert all(f"\n    {c}\n" in text for c in commands)


def test_cli_with_the_sweeps_config_folder_gone_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    gone = tmp_path / "worktree-removed" / "recipes" / "config"
    rows = [dict(ended_lm("kn", 0.2, 110.0, 104.5, 112.0), config_dir=str(gone))]
    monkeypatch.setattr(record, "read_sweep", lambda sweep_dir: rows)
    (tmp_path / "sweep").mkdir()
    out = tmp_path / "page.md"
    argv = [str(tmp_path / "sweep"), "--out", str(out), "--table", "ptb_medium"]
    with pytest.raises(SystemExit) as stop:
        page.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"fairseq-noise-page: error: --table ptb_medium: the config folder {gone} does not "
        "exist; pass the one that holds the table's config with --config-dir"
    )
    assert not out.exists()
    # the folder it names: the page is written
    config = Path(__file__).resolve().parents[1] / "recipes" / "config"
    monkeypatch.setattr(tables, "train_sentences", lambda cfg, cwd: PTB_LINES)
    assert page.main([*argv, "--config-dir", str(config)]) == 0
    assert read_page(out).text.startswith("# Penn Treebank, medium model (paper Table 2)\n")


@pytest.mark.parametrize(
    "make", [lambda p: (p / "run").mkdir(), lambda p: None], ids=["a run folder", "empty"]
)
def test_cli_without_records_is_a_usage_error(tmp_path, capsys, make):
    make(tmp_path)  # a run folder without row.json, or nothing at all
    for sweep in (tmp_path, tmp_path / "missing"):
        with pytest.raises(SystemExit) as stop:
            page.main([str(sweep), "--out", str(tmp_path / "page.md")])
        assert stop.value.code == 2
        assert f"error: SWEEP_DIR {sweep} " in capsys.readouterr().err
    assert not (tmp_path / "page.md").exists()


@pytest.mark.parametrize(
    "status, stop, expected",
    [
        ("ended", "halvings", "protocol"),
        ("ended", "patience", "protocol"),
        ("ended", "max_epoch", "max_epoch"),  # an epoch count is a cap, paper_halving or not
        ("ended", "time", "time"),
        ("ended", "max_update", "max_update"),
        ("ended", None, "ended"),  # no fact shows why (another scheduler's minimum rate)
        ("failed", "halvings", "failed"),
        ("stopped", None, "stopped"),
        ("training", None, "training"),
    ],
)
def test_ending(status, stop, expected):
    assert record.ending(make_row("kn", 0.2, status, stop=stop)) == expected


@pytest.mark.parametrize(
    "task, key",
    [
        ({"_name": "noised_language_modeling"}, "none"),
        ({"noise_scheme": "kn", "noise_gamma": 0.2}, "kn"),
        ({"noise_scheme": "kn", "noise_side": "both"}, "kn"),
        ({"noise_scheme": "kn", "noise_side": "source"}, "kn:source"),
        ({"noise_scheme": "unigram", "noise_side": "target"}, "unigram:target"),
        ({"noise_scheme": "none", "subword_sampling_alpha": 0}, "none"),
        ({"noise_scheme": "none", "subword_sampling_alpha": 0.1}, "none+sw0.1"),
        (
            {"noise_scheme": "kn", "subword_sampling_alpha": 0.1, "subword_sampling_nbest": 64},
            "kn+sw0.1/64",
        ),
        (
            {"noise_scheme": "kn", "noise_side": "source", "subword_sampling_alpha": 0.2}
            | {"subword_sampling_side": "target", "subword_sampling_nbest": -1},
            "kn:source+sw0.2:target",
        ),
        ({"noise_scheme": "kn", "precision": "fp32"}, "kn"),
        ({"noise_scheme": "kn", "precision": "bf16"}, "kn@bf16"),
        (
            {"noise_scheme": "none", "subword_sampling_alpha": 0.1, "precision": "bf16"},
            "none+sw0.1@bf16",
        ),
    ],
)
def test_row_key(task, key):
    assert record.row_key(task) == key


def test_a_model_chosen_inside_an_epoch_is_marked(sweep_of):
    """A row that validated inside epochs (--save-interval-updates) may evaluate a mid-epoch
    model, which the paper's protocol never picks: its cell says which validation chose it and
    its figures carry ‡."""
    inside = ended_lm("kn", 0.2, 110.0, 104.5, 112.0)
    inside["evaluation"]["chosen"] = {"epoch": 5, "updates": 530, "inside": True}
    got = sweep_of([ended_lm("none", 0, 130.0, 126.0, 131.0), inside])
    assert cells(got.main, "bigram Kneser-Ney")[1:3] == ["110.00‡", "104.50‡"]
    assert cells(got.main, "none")[1:3] == ["130.00", "126.00"]
    assert cells(got.every, "kn-g0.2")[3] == "update 530 in epoch 5 ‡"
    assert cells(got.every, "none-g0")[3] == "epoch 6"
    assert "Figures marked ‡ come from a model that a validation inside an epoch chose" in got.text


def test_each_stop_and_resume_of_a_row_is_said(sweep_of):
    t0 = 1795700000.0  # 2026-11-26 13:33:20 UTC
    row = ended_lm("kn", 0.2, 110.0, 104.5, 112.0)
    at = {"epoch": 3, "updates": 300, "inside": False, "where": "the end of epoch 3"}
    runs = [
        {"started": t0, "last": t0 + 600, "ended": None, "status": None, "from": None},
        {"started": t0 + 900, "last": t0 + 1800, "ended": None, "status": None, "from": at},
        {"started": t0 + 2000, "last": t0 + 3000, "ended": t0 + 3000, "status": "completed",
         "from": None},
    ]  # fmt: skip
    row["training"]["runs"] = {"count": 3, "resumed": 1, "restarts": 1, "list": runs}
    row["training"].update(training_seconds=1200.0, wall_seconds=3000.0)
    got = sweep_of([row])
    assert cells(got.every, "kn-g0.2")[-4:-1] == [
        "20 min",
        "50 min",
        "3 (1 resumed, 1 from scratch again)",
    ]
    assert (
        "- kn-g0.2: stopped 2026-11-26 13:43 UTC; resumed 2026-11-26 13:48 UTC from the end of epoch 3."
        in got.text
    )
    assert (
        "- kn-g0.2: stopped 2026-11-26 14:03 UTC; resumed 2026-11-26 14:06 UTC from scratch, starting again."
        in got.text
    )


def test_one_row_a_row_without_evaluation_and_no_empty_sections(sweep_of):
    got = sweep_of([make_row("kn", 0.4, "training", stop=None)])
    assert "from the records of 1 row." in got.text
    assert "Each row's evaluation" not in got.text  # nothing to put under it


def test_a_title_given_once_is_kept_when_rows_rewrite_the_page(sweep_of):
    rows = [ended_lm("none", 0, 130.0, 126.0, 131.0)]
    assert sweep_of(rows, title="My own title").text.startswith("# My own title\n")
    # a row that ends rewrites the page with the options it was written with
    assert sweep_of(rows, by_row=True).text.startswith("# My own title\n")
    # the row callback's own title is used where the page was given none
    other = sweep_of(rows, out=None, by_row=True, title="The sweep's title")
    assert other.text.startswith("# My own title\n")


def test_paths_outside_a_checkout_are_shown_as_they_run_from_one(sweep_of, tmp_path):
    row = ended_lm("none", 0, 130.0, 126.0, 131.0)
    row["command"] = (
        "fairseq-hydra-train -m --config-dir recipes/config --config-name ptb_medium "
        "hydra.sweep.dir=../sweeps/ptb/medium task.data=../sweeps/ptb/data-bin"
    )
    row["config"]["task"]["data"] = "../sweeps/ptb/data-bin"
    got = sweep_of([row], path_as=["../sweeps/ptb=runs/ptb"])
    assert "hydra.sweep.dir=runs/ptb/medium task.data=runs/ptb/data-bin" in got.text
    data = lambda text: text.split("Data: ", 1)[1].split(". Hardware", 1)[0]  # noqa: E731
    assert "../sweeps" not in got.text and data(got.text).startswith("`runs/ptb/data-bin`")
    # a row that ran in the checkout beside it, on the same data: named once
    beside = ended_lm("kn", 0.2, 110.0, 104.5, 112.0)
    beside["config"]["task"]["data"] = "runs/ptb/data-bin"
    got = sweep_of([row, beside], path_as=["../sweeps/ptb=runs/ptb"])
    assert data(got.text).startswith("`runs/ptb/data-bin`") and data(got.text).count("`") == 2


def test_unknown_words_in_the_output_are_counted_on_the_page(sweep_of):
    row = ended_mt("kn", 0.2, 9.1, 31.25)
    row["evaluation"]["unk"] = {"tokens": 12, "sentences": 9, "of": 1000}
    got = sweep_of([ended_mt("none", 0, 10.0, 28.0), row], sentences=29000)
    assert (
        "`<unk>` in the test output (tokens in sentences), scored as they are (sacrebleu's 13a "
        "makes three tokens of each): kn-both-g0.2 12 in 9 of 1000." in got.text
    )


def test_bleu_lowercased_on_request(tmp_path):
    """Lowercased, tokenized data (as some corpora come): BLEU can be scored lowercased, and
    sacrebleu's signature says so (the oracle: sacrebleu called directly)."""
    import sacrebleu

    from fairseq_noising.sweep import bleu

    ref = tmp_path / "ref"
    ref.write_text("The cat sat on the mat .\nA dog barked .\n")
    hyps = ["the cat sat on the mat .", "a dog barked ."]
    refs = ref.read_text().splitlines()
    cased = bleu.score(hyps, str(ref), "en", "none", str(tmp_path / "d1"))["bleu"]
    lowered = bleu.score(hyps, str(ref), "en", "none", str(tmp_path / "d2"), lowercase=True)
    lowered = lowered["bleu"]
    assert lowered["score"] == pytest.approx(100.0) and cased["score"] < 100.0
    assert cased["score"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert "case:lc" in lowered["signature"] and "case:mixed" in cased["signature"]


@pytest.mark.parametrize(
    "test1, test2, expected",
    [  # kn 0.4's two seeds against none's test mean 127.5 (spread 3)
        (108.0, 100.0, ["2", "108.50", "1.00", "104.00", "8.00", "-23.50", "3.00", "yes"]),
        (108.0, 140.0, ["2", "108.50", "1.00", "124.00", "32.00", "-3.50", "3.00", "no"]),
        # kn's own spread (1) is smaller than the difference (3), none's (3) is not
        (124.0, 125.0, ["2", "108.50", "1.00", "124.50", "1.00", "-3.00", "3.00", "no"]),
    ],
)
def test_a_difference_to_none_is_read_against_both_spreads(sweep_of, test1, test2, expected):
    rows = [
        ended_lm("none", 0, 130.0, 126.0, 131.0),
        ended_lm("none", 0, 132.0, 129.0, 133.0, seed=2),
        ended_lm("kn", 0.4, 109.0, test1, 112.0),
        ended_lm("kn", 0.4, 108.0, test2, 112.0, seed=2),
    ]
    over = md_tables(sweep_of(rows).text)[1]
    assert cells(over, "bigram Kneser-Ney") == expected


def test_rows_with_subword_sampling_have_their_own_label_after_the_row_without():
    from fairseq_noising.sweep.page.paper import row_label, row_order

    keys = ["none+sw0.1/64", "kn", "none", "kn:source+sw0.2:target", "kn:source"]
    assert sorted(keys, key=row_order) == [
        "none",
        "none+sw0.1/64",
        "kn",
        "kn:source",
        "kn:source+sw0.2:target",
    ]
    assert row_label("none+sw0.1/64") == "none, subword sampling alpha 0.1 (64-best)"
    assert row_label("kn:source+sw0.2:target") == (
        "bigram Kneser-Ney, source only, subword sampling alpha 0.2 on the target only"
    )


def test_each_rows_precision_is_on_the_page(sweep_of):
    """fp32 and bf16 rows of one scheme and seed: their own lines (the paper's figures beside
    both), a precision column, and the caption saying what each trained and was evaluated in;
    a page of fp32 rows says so in its caption alone."""
    fp32 = ended_lm("none", 0, 115.0, 110.5, 116.0)
    bf16 = dict(ended_lm("none", 0, 116.0, 111.25, 117.0), key="none@bf16", precision="bf16")
    bf16["name"] += "-bf16"
    shown = sweep_of([fp32, bf16])
    assert cells(shown.main, "none") == ["0", "115.00", "110.50", "84.3", "80.4"]
    assert cells(shown.main, "none, bf16") == ["0", "116.00", "111.25", "84.3", "80.4"]
    assert shown.every[0][:4] == ["row", "gamma_0", "precision", "Validation"]
    assert [r[2] for r in shown.every[1:]] == ["fp32", "bf16"]
    assert (
        "Precision: each row's column; bf16 rows trained under torch.autocast, fp32 weights and "
        "checkpoints; validation and evaluation in fp32 for every row." in shown.text
    )
    assert "An epoch's training time" not in shown.text  # none recorded
    fp32["training"]["epoch_seconds"], bf16["training"]["epoch_seconds"] = 600.0, 900.0
    timed = sweep_of([fp32, bf16]).text
    assert (
        "An epoch's training time (fairseq's train_wall, the median over epochs): fp32 10 min, "
        "bf16 15 min; bf16 / fp32 1.50." in timed
    )
    alone = sweep_of([fp32])
    assert "Precision: fp32 (training and evaluation)." in alone.text
    assert "An epoch's training time" not in alone.text
    assert "precision" not in alone.every[0]


def test_the_evaluation_commands_are_said_to_print_what_they_print(sweep_of):
    mt = sweep_of([ended_mt("kn", 0.2, 9.0, 30.0)], sentences=29000).text
    assert "fairseq-validate prints the same validation perplexity" in mt
    assert "its own BLEU line is fairseq's tokenized BLEU against the binarized references" in mt
    assert "print the same figures" not in mt
    lm = sweep_of([ended_lm("none", 0, 115.0, 110.5, 116.0)]).text
    assert "the fairseq-eval-lm commands print the same perplexities, rounded:" in lm
    assert "fairseq-generate" not in lm


def test_a_row_whose_halvings_began_on_a_plateau_is_marked(sweep_of):
    """The 1% rule halves after an epoch that improves validation by less than 1%; a row whose
    first halving came above the table's plateau_ppl (15 for Multi30k) halved before its model
    used its source, and the page says so; one that halved below it is not marked."""
    plateau = ended_mt("kn", 0.2, 40.0, 2.7)
    plateau["training"].update(
        valid_ppl={"4": 55.5, "5": 57.14, "6": 47.03},
        train_lr={"1": 1.0, "5": 1.0, "6": 0.5, "7": 0.25},
    )
    late = ended_mt("none", 0, 6.8, 35.0)
    late["training"].update(
        valid_ppl={"15": 7.9, "16": 7.92}, train_lr={"1": 1.0, "16": 1.0, "17": 0.5}
    )
    rows = [plateau, late]
    table = dict(MULTI30K, plateau_ppl=15)
    for r in rows:
        r["table"] = table
    got = sweep_of(rows, sentences=29000)
    assert cells(got.every, "kn-both-g0.2")[-1].endswith(
        "; halvings began on a plateau: valid 57.14 after epoch 5, above 15"
    )
    assert "plateau" not in cells(got.every, "none-both-g0")[-1]
    # a table without the option marks nothing
    for r in rows:
        r["table"] = MULTI30K
    assert "plateau" not in sweep_of(rows, sentences=29000).text


def _plateau_sweep(through):
    """kn seeds 1 and 2 halved on the plateau (first halving at 57 and 61); seeds 3 and 4 trained
    past it (``through``: ended and evaluated, else still training); none seeds 1 and 2."""

    def halved_at(row, valid):
        row["training"].update(
            valid_ppl={"5": valid, "6": valid * 0.9}, train_ppl={"5": 70.0, "6": 60.0},
            train_lr={"1": 1.0, "5": 1.0, "6": 0.5},
        )  # fmt: skip
        return row

    rows = [halved_at(ended_mt("kn", 0.2, 40.0, 2.7, seed=1), 57.0)]
    rows.append(halved_at(ended_mt("kn", 0.2, 42.0, 2.5, seed=2), 61.0))
    for seed, valid, bleu in ((3, 6.5, 36.0), (4, 6.7, 35.0)):
        row = ended_mt("kn", 0.2, valid, bleu, seed=seed)
        if not through:
            row = make_row("kn", 0.2, "training", translation=True, seed=seed, stop=None)
        rows.append(halved_at(row, 9.0))
    for seed, valid, bleu in ((1, 7.0, 34.4), (2, 7.1, 34.5)):
        rows.append(halved_at(ended_mt("none", 0, valid, bleu, seed=seed), 8.0))
    for r in rows:
        r["table"] = dict(MULTI30K, plateau_ppl=15)
    return rows


def test_rows_that_halved_on_a_plateau_are_left_out_of_the_means(sweep_of, drawn):
    """The issue's protocol: a row whose halvings began on the plateau stays on the page, and its
    scheme gets more seeds; the table's figures and the means over seeds are those of the rows
    that trained past the plateau (oracle: the means by hand), the others named as left out."""
    got = sweep_of(_plateau_sweep(through=True), sentences=29000)
    # kn: seeds 3 and 4 only, (6.5 + 6.7) / 2 and (36 + 35) / 2, spread 1; none 34.45
    assert cells(got.main, "bigram Kneser-Ney")[:6] == ["0.2", "6.60", "35.50", "—", "2", "1.00"]
    over = md_tables(got.text)[1]
    assert cells(over, "bigram Kneser-Ney") == [
        "2", "6.60", "0.20", "35.50", "1.00", "+1.05", "0.10", "yes"
    ]  # fmt: skip
    assert (
        "Left out of the figures above and of the means over seeds: kn-both-g0.2, "
        "kn-both-g0.2-s2, whose halvings began on a plateau" in got.text
    )
    assert "Figures marked §" not in got.text
    runs = drawn[-1][0]
    assert sorted(runs) == [f"kn gamma_0 0.2 seed {s}" for s in (3, 4)] + [
        f"none seed {s}" for s in (1, 2)
    ]
    # every row is still on the page, the plateau rows with their figures
    assert cells(got.every, "kn-both-g0.2-s2")[2:4] == ["42.00", "2.50"]


def test_a_scheme_with_only_plateau_rows_shows_them_marked(sweep_of):
    """Before any row of the scheme trained past the plateau, its figures are the plateau rows',
    marked §; nothing is said to be left out."""
    got = sweep_of(_plateau_sweep(through=False), sentences=29000)
    assert cells(got.main, "bigram Kneser-Ney")[:3] == ["0.2", "41.00§", "2.60§"]
    assert cells(got.main, "none")[:3] == ["0", "7.05", "34.45"]
    assert "Figures marked § come only from rows whose halvings began on a plateau" in got.text
    assert "Left out of" not in got.text
    # a table without plateau_ppl: every evaluated seed counts, unmarked
    rows = _plateau_sweep(through=True)
    for r in rows:
        r["table"] = MULTI30K
    plain = sweep_of(rows, sentences=29000)
    assert cells(plain.main, "bigram Kneser-Ney")[:3] == ["0.2", "23.80", "19.05"]
