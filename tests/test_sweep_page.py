"""A sweep's results page (fairseq_noising/sweep/page.py) and the row records it reads
(sweep/record.py), on sweep folders written here by hand: each row's ``row.json`` as the sweep's
callback writes it and, for a row still training, a few lines of fairseq-hydra-train's log.

Oracles: the cells worked out by hand in this file from those records (gamma_0 the lowest
evaluated validation perplexity among a row key's ended rows, the first of equals; the paper's row
order and figures as paper.py's source lists them; the share of an epoch from the log's last
train_inner line), the same sweep's page without a failed row, and the logs as written here. The
page's Markdown tables are read back cell by cell.
"""

import json
import os
import re
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import pytest

from fairseq_noising import analysis
from fairseq_noising.sweep import page, record

STARTED, ENDED = "2026-11-25 01:53:48 UTC", "2026-11-25 02:53:48 UTC"
SPLITS = ("valid", "test")
OOM = "RuntimeError: CUDA out of memory"
SIG = "nrefs:1|case:mixed|eff:no|tok:{}|smooth:exp|version:2.6.0"  # sacrebleu's, as recorded

# fairseq-hydra-train's log of kn gamma_0 0.4 (lines of /tmp/sw1's): epochs 1 and 2 validated
# (ppl 95, then 90), 10 of epoch 3's 40 updates done
KN_LOG = """\
[2026-11-25 01:53:48,992][fairseq.utils][INFO] - --user-dir=/work/main/fairseq_noising has already been imported.
[2026-11-25 01:53:49,006][fairseq_cli.train][INFO] - {'_name': None, 'common': {'_name': None, 'log_format': 'simple', 'seed': 1}, 'task': {'_name': 'noised_language_modeling', 'noise_scheme': 'kn', 'noise_gamma': 0.4}}
[2026-11-25 01:53:50,255][fairseq.trainer][INFO] - begin training epoch 1
[2026-11-25 01:53:53,524][valid][INFO] - epoch 001 | valid on 'valid' subset | loss 367.827 | nll_loss 6.57 | ppl 95 | wps 47570.7 | wpb 695.8 | bsz 20 | num_updates 40
[2026-11-25 01:53:53,540][fairseq_cli.train][INFO] - end of epoch 1 (average epoch stats below)
[2026-11-25 01:53:53,540][train][INFO] - epoch 001 | loss 399.367 | nll_loss 11.41 | ppl 2722.07 | wps 4518.9 | ups 6.46 | wpb 700 | bsz 20 | num_updates 40 | lr 1 | gnorm 16.486 | clip 90 | train_wall 2 | wall 4
[2026-11-25 01:53:53,541][fairseq.trainer][INFO] - begin training epoch 2
[2026-11-25 01:53:57,524][valid][INFO] - epoch 002 | valid on 'valid' subset | loss 360.2 | nll_loss 6.492 | ppl 90 | wps 47570.7 | wpb 695.8 | bsz 20 | num_updates 80
[2026-11-25 01:53:57,540][train][INFO] - epoch 002 | loss 390.1 | nll_loss 6.91 | ppl 120.5 | wps 4518.9 | ups 6.46 | wpb 700 | bsz 20 | num_updates 80 | lr 1 | gnorm 2.4 | clip 20 | train_wall 2 | wall 8
[2026-11-25 01:53:57,541][fairseq.trainer][INFO] - begin training epoch 3
[2026-11-25 01:53:59,100][train_inner][INFO] - epoch 003:     10 / 40 loss=6.4, ppl=84.45, wps=4600, ups=6.5, wpb=700, bsz=20, num_updates=90, lr=1, gnorm=1.9, clip=0, train_wall=1, wall=10
"""
# what record.training makes of KN_LOG, worked out from its lines
KN_LOG_TRAINING = {
    "epochs": 2,
    "epochs_done": 2.25,
    "valid_ppl": {"1": 95.0, "2": 90.0},
    "train_ppl": {"1": 2722.07, "2": 120.5},
    "halvings": 0,
    "max_halvings": 8,
    "lr": 1.0,
    "stop": None,
    "wall_seconds": 8.0,
    "gpu": None,
}


def make_record(key, gamma, status="ended", evaluation=None, error=None, translation=False, **got):
    """A row's record as the callback writes it: an LM row of ptb-medium (paper_halving, 8
    halvings, all done) or a translation row of multi30k (fixed rate, stopped by patience);
    ``got``: fields of its ``training`` (how far it got) other than those."""
    scheme, _, side = key.partition(":")
    task = {"_name": "noised_language_modeling", "data": "/data/ptb-bin", "noise_scheme": scheme}
    scheduler = {"_name": "paper_halving", "halvings": 8, "halving_threshold": None}
    if translation:
        task.update(_name="noised_translation", data="/data/m30k-bin", noise_side=side or "both")
        scheduler = {"_name": "fixed"}
    task["noise_gamma"] = gamma
    halvings = None if translation else 8
    training = dict(epochs=6, epochs_done=6.0, valid_ppl={}, train_ppl={}, halvings=halvings)
    training.update(max_halvings=halvings, lr=0.00390625)
    training.update(stop="patience" if translation else "halvings", wall_seconds=600.0, gpu=None)
    training.update(got)
    config_name = "multi30k" if translation else "ptb_medium"
    override = f"task={{noise_scheme:{scheme},noise_side:{side or 'both'},noise_gamma:{gamma:g}}}"
    rec = {
        "format": 1,
        "table": "multi30k" if translation else "ptb-medium",
        "config_name": config_name,
        "overrides": [override],
        "command": f"fairseq-hydra-train -m --config-name {config_name} '{override}'",
        "key": key,
        "gamma": float(gamma),
        "status": status,
        "started": STARTED,
        "training": training,
        "config": {
            "task": task,
            "optimization": {"max_epoch": 40, "stop_time_hours": 0.0 if translation else 2.0},
            "lr_scheduler": scheduler,
            "checkpoint": {"save_dir": f"/runs/{key}-g{gamma:g}", "patience": 3},
        },
    }
    if status != "training":
        rec["ended"] = ENDED
    if evaluation is not None:
        rec["evaluation"] = evaluation
    if error is not None:
        rec["error"] = error
    return rec


def ended_lm(key, gamma, valid, test, fairseq_valid):
    """An LM row that ended: evaluated valid and test perplexity, fairseq's last validation."""
    commands = [f"fairseq-eval-lm /data/ptb-bin --gen-subset {s} > {s}.eval.log" for s in SPLITS]
    evaluation = {"commands": commands, "valid_ppl": valid, "test_ppl": test}
    curves = dict(valid_ppl={"5": fairseq_valid + 3, "6": fairseq_valid}, train_ppl={"6": 80.0})
    return make_record(key, gamma, evaluation=evaluation, **curves)


def ended_mt(key, gamma, valid, bleu, tok_bleu=None):
    evaluation = {"commands": ["fairseq-validate /data/m30k-bin > valid.eval.log"]}
    evaluation.update(valid_ppl=valid, bleu={"score": bleu, "signature": SIG.format("13a")})
    if tok_bleu is not None:  # only with a tokenized reference
        evaluation["tok_bleu"] = {"score": tok_bleu, "signature": SIG.format("none")}
    return make_record(key, gamma, evaluation=evaluation, translation=True, valid_ppl={"6": 9.0})


def write_sweep(root, rows, logs=()):
    """A sweep folder: a run folder per row with its row.json, and the logs given."""
    root.mkdir(exist_ok=True)
    for name, rec in rows.items():
        (root / name).mkdir()
        (root / name / "row.json").write_text(json.dumps(rec, indent=1), encoding="utf-8")
    for name in logs:
        (root / name / "hydra_train.log").write_text(KN_LOG, encoding="utf-8")
    return root


def lm_rows():
    """The LM sweep: fairseq's last validations order the kn and blank rows otherwise than
    their evaluations do; none stopped by the time budget; unigram 0.1 failed; kn 0.4 training."""
    rows = {
        "blank-g0.1": ended_lm("blank", 0.1, 100.0, 95.5, 101.0),
        "blank-g0.2": ended_lm("blank", 0.2, 100.0, 97.25, 99.0),
        "kn-g0.1": ended_lm("kn", 0.1, 120.0, 116.0, 105.0),
        "kn-g0.2": ended_lm("kn", 0.2, 110.0, 104.5, 112.0),
        "kn-g0.3": ended_lm("kn", 0.3, 115.0, 109.0, 118.0),
        "kn-g0.4": make_record("kn", 0.4, "training", epochs=0, epochs_done=0.0, halvings=0),
        "none-g0": ended_lm("none", 0, 130.0, 126.0, 131.0),
        "unigram-g0.1": make_record(
            "unigram", 0.1, "failed", error=OOM, valid_ppl={"1": 80.0}, stop=None
        ),
        "unigram-g0.2": ended_lm("unigram", 0.2, 105.0, 101.0, 106.0),
    }
    rows["none-g0"]["training"].update(stop="time", epochs=5, epochs_done=5.5, halvings=2, lr=0.25)
    return rows


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
    main, every = md_tables(text)
    return Page(text, main, every)


def cells(table, row):
    """The cells after the first of the row whose first cell is ``row``."""
    return next(r[1:] for r in table if r[0] == row)


@pytest.fixture(autouse=True)
def drawn(monkeypatch):
    """Figure 1's drawings, recorded instead of drawn (no matplotlib)."""
    calls = []
    fake = SimpleNamespace(curves=lambda runs, png: calls.append((runs, png)))
    monkeypatch.setattr(analysis, "plots", fake, raising=False)
    return calls


@pytest.fixture
def lm_page(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", lm_rows(), logs=["kn-g0.4"])
    return read_page(page.write(str(sweep)))


def test_gamma0_is_the_lowest_evaluated_validation_of_ended_rows(lm_page, drawn):
    # kn: 0.2 (110 of 120, 110, 115), not 0.4 training (fairseq's 90) nor 0.1 (fairseq's 105);
    # blank: 0.1, the first of two 100s; unigram: 0.2, not 0.1 that failed (fairseq's 80)
    assert lm_page.main == [LM_HEADER, *LM_MAIN]
    # Figure 1 draws the chosen rows' curves: none's and kn 0.2's
    [(runs, png)] = drawn
    assert list(runs) == ["none", "kn gamma_0 0.2"]
    assert runs["kn gamma_0 0.2"] == ({6: 80.0}, {5: 115.0, 6: 112.0})
    assert "![training and validation curves](results-curves.png)" in lm_page.text


def test_rows_in_the_papers_order_with_the_registry_labels(lm_page):
    assert [r[0] for r in lm_page.main[1:]] == ["none", "blank", "unigram", "bigram Kneser-Ney"]
    assert [r[0] for r in lm_page.every[1:]] == [
        "none-g0",
        "blank-g0.1",
        "blank-g0.2",
        "unigram-g0.1",
        "unigram-g0.2",
        "kn-g0.1",
        "kn-g0.2",
        "kn-g0.3",
        "kn-g0.4",
    ]


def test_a_row_still_training_shows_fairseqs_validation_and_where_it_is(lm_page):
    assert re.search(r"^\*\*In progress\*\* \([^)]+\): 1 of 9 rows training\.$", lm_page.text, re.M)
    # fairseq's last validation (epoch 2); 10 / 40 updates of epoch 3, lr=1; no halving yet
    where = "training, epoch 3 (25% of it), lr 1, 0 of 8 halvings"
    assert cells(lm_page.every, "kn-g0.4") == ["0.4", "90.00*", "2", "0", "8 s", where]
    ended = ["0.2", "110.00", "6", "8", "10 min", "end of the protocol (epoch 6)"]
    assert cells(lm_page.every, "kn-g0.2") == ended


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


def test_a_failed_row_is_listed_and_leaves_the_other_rows_alone(tmp_path, lm_page):
    assert cells(lm_page.every, "unigram-g0.1")[0] == "0.1"
    assert cells(lm_page.every, "unigram-g0.1")[-1] == f"FAILED ({OOM})"
    rows = lm_rows()
    del rows["unigram-g0.1"]
    without = read_page(page.write(str(write_sweep(tmp_path / "ok", rows, logs=["kn-g0.4"]))))
    assert lm_page.main == without.main
    assert [r for r in lm_page.every if r[0] != "unigram-g0.1"] == without.every


def test_a_pipe_in_an_error_line_stays_in_its_cell(tmp_path):
    # an evaluation killed by the system: its error ends with fairseq's last line, a log line
    error = (
        "evaluation: fairseq-eval-lm failed (exit -9): 2026-11-25 01:54:10 | INFO | "
        "fairseq.data.data_utils | loaded 3,370 examples from: /data/ptb-bin/test"
    )
    rows = {"kn-g0.2": ended_lm("kn", 0.2, 110.0, 104.5, 112.0)}
    rows["kn-g0.3"] = make_record("kn", 0.3, "failed", error=error)
    every = read_page(page.write(str(write_sweep(tmp_path, rows)))).every
    assert cells(every, "kn-g0.3") == ["0.3", "—", "6", "8", "10 min", f"FAILED ({error})"]


def test_translation_page_has_bleu_signatures_and_the_iwslt_figures(tmp_path, drawn):
    rows = {
        "0": ended_mt("kn:target", 0.2, 9.5, 30.1, 31.4),
        "1": ended_mt("kn:source", 0.1, 9.8, 29.0, 30.2),
        "2": ended_mt("kn", 0.2, 9.1, 31.25),  # no tokenized reference: no tok BLEU
        "3": ended_mt("none", 0, 10.0, 28.0, 29.5),
        "4": ended_mt("kn", 0.4, 9.3, 32.0, 33.0),  # the best BLEU, not the best perplexity
    }
    got = read_page(page.write(str(write_sweep(tmp_path / "sweep", rows))))
    header = ["Row", "gamma_0", "Perplexity", "BLEU", "tok BLEU"]
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
    assert [r[4:] for r in got.every[1:]] == [["—", "10 min", "end of the protocol (epoch 6)"]] * 5
    assert "Figure 1" not in got.text and drawn == []


def test_read_sweep_reads_only_records_of_its_format(tmp_path):
    ended, training = ended_lm("kn", 0.2, 110.0, 104.5, 112.0), make_record("kn", 0.4, "training")
    sweep = write_sweep(tmp_path, {"a": ended, "f": training}, logs=["a", "f"])
    (sweep / "b").mkdir()  # no row.json
    for name, text in [("c", '{"format": 1, "key": "kn", "sta'), ("d", "")]:
        (sweep / name).mkdir()
        (sweep / name / "row.json").write_text(text)
    write_sweep(sweep, {"e": dict(ended, format=2)})
    (sweep / "row.json").write_text(json.dumps(ended))  # a file, not a run folder
    records = record.read_sweep(str(sweep))
    assert [r["run_dir"] for r in records] == [str(sweep / "a"), str(sweep / "f")]
    # an ended row's record stands as written; a training row's is read from its log
    assert records[0]["training"] == ended["training"]
    assert records[1]["training"] == KN_LOG_TRAINING


def test_cli_writes_the_page_and_copies_each_rows_log(tmp_path, capsys):
    rows = {"kn-g0.2": ended_lm("kn", 0.2, 110.0, 104.5, 112.0)}
    rows["kn-g0.4"] = make_record("kn", 0.4, "training")
    sweep = write_sweep(tmp_path / "sweep", rows, logs=list(rows))
    logs = tmp_path / "page-logs"
    logs.mkdir()
    (logs / "stale.train.log").write_text("an earlier page's")
    out = tmp_path / "page.md"
    assert page.main([str(sweep), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert sorted(os.listdir(logs)) == ["kn-g0.2.train.log", "kn-g0.4.train.log"]
    assert all((logs / f).read_text() == KN_LOG for f in os.listdir(logs))
    text = read_page(out).text
    assert text.startswith("# Penn Treebank, medium model (paper Table 2)\n")
    assert "Training logs: [`page-logs/`](page-logs/)." in text
    commands = [rec["command"] for rec in rows.values()] + rows["kn-g0.2"]["evaluation"]["commands"]
    assert all(f"\n    {c}\n" in text for c in commands)


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
    "status, stop, halvings, expected",
    [
        ("ended", "halvings", 8, "protocol"),
        ("ended", "patience", None, "protocol"),
        ("ended", "patience", 3, "protocol"),
        ("ended", None, None, "protocol"),  # --max-epoch, the protocol without paper_halving
        ("ended", None, 3, "max_epoch"),  # --max-epoch cut paper_halving short
        ("ended", "time", 2, "time"),
        ("ended", "time", None, "time"),
        ("ended", "max_update", None, "max_update"),
        ("failed", "halvings", 8, "failed"),
        ("failed", None, None, "failed"),
        ("training", None, 0, "training"),
    ],
)
def test_ending(status, stop, halvings, expected):
    rec = make_record("kn", 0.2, status, stop=stop, halvings=halvings)
    assert record.ending(rec) == expected


@pytest.mark.parametrize(
    "task, key",
    [
        ({"_name": "noised_language_modeling"}, "none"),
        ({"noise_scheme": "kn", "noise_gamma": 0.2}, "kn"),
        ({"noise_scheme": "kn", "noise_side": "both"}, "kn"),
        ({"noise_scheme": "kn", "noise_side": "source"}, "kn:source"),
        ({"noise_scheme": "unigram", "noise_side": "target"}, "unigram:target"),
    ],
)
def test_row_key(task, key):
    assert record.row_key(task) == key
