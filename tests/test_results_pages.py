"""The results pages (recipes/report.py write, recipes/results_page.py) and what they are made
of: the settings check, row labels from the scheme registry, gamma_0 chosen on validation
perplexity, wall times, perplexities read from fairseq's outputs, and whole pages written from
synthetic runs (fairseq replaced by a script of outputs, recipe_kit.FakeFairseq), checked against
figures written out by hand; the pages written while runs train, with a failed run, and with runs
stopped by the time budget."""

import json
import os
import time
import types
from pathlib import Path

import pytest
from recipe_kit import (
    FAKE_BIN,
    H100,
    REPO,
    analysis_section,
    assert_no_machine_path,
    eval_lm_output,
    paper_tables,
    report,
    results_page,
    rows,
    run_folders,
    run_queue,
    steps,
    table_rows,
    train_log,
)

from fairseq_noising.schemes import REGISTRY

settings_error = report.settings_error
with_scheme_grids = report.with_scheme_grids


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"SIZE": "huge"}, "SIZE must be small or medium or large, got 'huge'"),
        (
            {"SCHEMES": "none blnk"},
            "SCHEMES must name registered schemes (none, blank, uniform, "
            "unigram, ad, kn, mkn), got 'blnk'",
        ),
        ({"SCHEMES": ""}, "SCHEMES must name at least one scheme"),
        ({"SCHEMES": "none kn none"}, "SCHEMES must name each row once, got 'none kn none'"),
        ({"SCHEMES": "kn:source"}, "SCHEMES must name registered schemes"),
        (
            {"ROWS": "none kn:both"},
            "ROWS: a row is SCHEME, SCHEME:source or SCHEME:target, got 'kn:both'",
        ),
        ({"ROWS": "knn:source"}, "ROWS must name registered schemes"),
        ({"GAMMAS": "0.1 1.5"}, "GAMMAS must be gamma_0 values in [0, 1], got '0.1 1.5'"),
        ({"GAMMAS": "0.1,0.2"}, "GAMMAS must be gamma_0 values in [0, 1]"),
        ({"GAMMAS": ""}, "GAMMAS must be gamma_0 values in [0, 1], got ''"),
        ({"GAMMA": "0.1 0.2"}, "GAMMA must be one gamma_0 value in [0, 1], got '0.1 0.2'"),
        ({"MAX_EPOCH": "0"}, "MAX_EPOCH must be a whole number >= 1, got '0'"),
        ({"MAX_EPOCH": "5.5"}, "MAX_EPOCH must be a whole number >= 1, got '5.5'"),
        ({"HIDDEN": "big"}, "HIDDEN must be a whole number >= 1, got 'big'"),
        ({"DROPOUT": "1"}, "DROPOUT must be a probability in [0, 1), got '1'"),
        ({"TOKENIZER": "spacy"}, "TOKENIZER must be auto or moses or simple, got 'spacy'"),
        ({"SPM_JOINT": "yes"}, "SPM_JOINT must be 0 or 1, got 'yes'"),
        ({"OPTIMIZER": "adagrad"}, "OPTIMIZER must be sgd or adam, got 'adagrad'"),
        ({"LR": "0"}, "LR must be a learning rate > 0, got '0'"),
        ({"LR": "fast"}, "LR must be a learning rate > 0, got 'fast'"),
        ({"WARMUP": "-1"}, "WARMUP must be a whole number >= 0, got '-1'"),
        ({"PATIENCE": "0"}, "PATIENCE must be a whole number >= 1, got '0'"),
        ({"LABEL_SMOOTHING": "1.0"}, "LABEL_SMOOTHING must be a probability in [0, 1)"),
        (
            {"ARCH": "transformer_iwslt_de_en", "HIDDEN": "256"},
            "HIDDEN sets --hidden-size of the noising_lstm architectures, which "
            "ARCH=transformer_iwslt_de_en has not: give its sizes in EXTRA_ARGS",
        ),
        (
            {"ARCH": "transformer", "HIDDEN": "", "LAYERS": "3"},
            "LAYERS sets --num-layers of the noising_lstm architectures, which ARCH=transformer",
        ),
    ],
)
def test_a_bad_setting_is_named_with_what_was_expected(settings, message):
    assert settings_error(settings).startswith(message)


def test_good_settings_pass_and_the_scheme_grids_come_from_the_environment():
    good = {
        "SIZE": "medium",
        "SCHEMES": "none blank unigram kn",
        "GAMMAS": "0.1 0.2 0.3",
        "HIDDEN": "",
        "DROPOUT": "",
        "MAX_EPOCH": "200",
        "HALVINGS": "0",
        "SEED": "1",
        "EXTRA_ARGS": "--max-update 10",
        "ROWS": "none kn kn:source kn:target",
        "DEVICE": "x",
        "OPTIMIZER": "adam",
        "LR": "",
        "WARMUP": "0",
        "PATIENCE": "3",
        "LABEL_SMOOTHING": "0.1",
    }
    assert settings_error(good) is None
    transformer = {"ARCH": "transformer_iwslt_de_en", "HIDDEN": "", "LAYERS": "", "LR": "5e-4"}
    assert settings_error(transformer) is None
    grids = with_scheme_grids({"SCHEMES": "none kn"}, {"GAMMAS_kn": "0.3 2", "GAMMAS_ad": "9"})
    assert grids == {"SCHEMES": "none kn", "GAMMAS_kn": "0.3 2"}
    assert settings_error(grids) == "GAMMAS_kn must be gamma_0 values in [0, 1], got '0.3 2'"


def test_row_labels_come_from_the_scheme_registry(monkeypatch):
    assert paper_tables.row_label("none") == "none"
    assert paper_tables.row_label("kn") == "bigram Kneser-Ney"
    assert paper_tables.row_label("kn:source") == "bigram Kneser-Ney, source only"
    assert paper_tables.row_label("unigram:target") == "unigram, target only"
    assert paper_tables.row_label("mkn") == "Kneser-Ney, modified discounts"
    renamed = dict(REGISTRY, ad=types.SimpleNamespace(label="absolute discounting (renamed)"))
    monkeypatch.setattr(paper_tables, "REGISTRY", renamed)
    assert paper_tables.row_label("ad:target") == "absolute discounting (renamed), target only"


@pytest.mark.parametrize(
    "seconds, shown",
    [
        (None, "—"),
        (42.4, "42 s"),
        (59.6, "60 s"),
        (89.0, "1 min"),
        (307.0, "5 min"),
        (3599.0, "1 h 00 min"),
        (3900.0, "1 h 05 min"),
        (36000.0, "10 h 00 min"),
    ],
)
def test_wall_times_are_shown_in_seconds_minutes_or_hours(seconds, shown):
    assert results_page.duration(seconds) == shown


def test_perplexities_are_read_from_fairseq_eval_lm_and_fairseq_validate(tmp_path):
    lm = tmp_path / "lm.log"
    lm.write_text("noise\n" + eval_lm_output(300.5) + eval_lm_output(123.45) + "end\n")
    mt = tmp_path / "mt.log"
    mt.write_text(
        "2026 | INFO | valid | valid on 'valid' subset | loss 5.1 | nll_loss 4.2 | "
        "ppl 18.37 | wps 100 | wpb 300\n"
    )
    empty = tmp_path / "empty.log"
    empty.write_text("Traceback (most recent call last):\n")
    assert run_folders.perplexity(str(lm)) == 123.45  # the last one
    assert run_folders.perplexity(str(mt)) == 18.37
    assert run_folders.perplexity(str(empty)) is None
    assert run_folders.perplexity(str(tmp_path / "missing.log")) is None


def test_gamma_0_is_chosen_on_validation_perplexity(tmp_path, capsys):
    runs = []
    for gamma, ppl in (("0.1", 125.0), ("0.2", 119.5), ("0.3", 119.5), ("0.4", 131.0)):
        run = tmp_path / f"kn-g{gamma}"
        run.mkdir()
        (run / "valid.eval.log").write_text(eval_lm_output(ppl))
        (run / (".budget" if gamma == "0.3" else ".done")).write_text("fairseq-train")
        runs.append(str(run))
    best = run_folders.best_run
    assert best(runs, dry_run=False, prog="t.sh") == runs[1]  # the first of equals
    assert best(runs[2:], dry_run=False, prog="t.sh") == runs[2]  # stopped by the budget: trained
    assert best([runs[3]], dry_run=False, prog="t.sh") == runs[3]  # one run: without looking
    # a failed run is no candidate, and a scheme whose runs all failed has none
    failed = tmp_path / "kn-g0.05"
    failed.mkdir()
    (failed / ".failed").write_text("exit 1: out of memory")
    (failed / "valid.eval.log").write_text(eval_lm_output(1.0))  # an older evaluation
    assert best([str(failed)] + runs, dry_run=False, prog="t.sh") == runs[1]
    assert best([str(failed)], dry_run=False, prog="t.sh") == ""
    missing = tmp_path / "kn-g0.5"
    missing.mkdir()
    (missing / ".done").write_text("fairseq-train")
    assert best(
        [str(tmp_path / "kn-g0.6"), str(tmp_path / "kn-g0.7")], dry_run=True, prog="t.sh"
    ) == str(tmp_path / "kn-gBEST")
    with pytest.raises(SystemExit):
        best(runs + [str(missing)], dry_run=False, prog="t.sh")
    assert (
        f"t.sh: no validation perplexity in {tmp_path}/kn-g0.5/valid.eval.log"
        in capsys.readouterr().err
    )


def lm_pipeline(tmp_path, fake, script, budget=()):
    """The steps of recipes/ptb.sh on fake fairseq: SCRIPT is (scheme, gamma) -> (train log
    epochs, valid ppl, test ppl); returns the run folders and the preparation folder."""
    queue = tmp_path / "queue"
    run = steps.Steps("ptb.sh", dry_run=False, queue=str(queue))
    data = tmp_path / "data-bin"
    run.prepare(
        str(data),
        [
            f"{FAKE_BIN}/fairseq-preprocess",
            "--only-source",
            "--trainpref",
            f"{REPO.parent}/shared/data/ptb/ptb.train.txt",
            "--destdir",
            str(data),
        ],
    )
    runs = {}
    evaluate = [f"{FAKE_BIN}/fairseq-eval-lm", str(data), "--user-dir", "fairseq_noising"]
    for (scheme, gamma), (epochs, valid, test) in script.items():
        folder = str(tmp_path / "medium" / f"{scheme}-g{gamma}")
        runs[scheme, gamma] = folder
        complete = folder not in fake.stopped_by_time
        fake.train_logs[folder] = train_log(scheme, gamma, epochs, gpu=H100, complete=complete)
        fake.perplexity[(folder, "valid")] = valid
        fake.perplexity[(folder, "test")] = test
        cmd = [f"{FAKE_BIN}/fairseq-train", str(data), "--user-dir", "fairseq_noising"]
        cmd += ["--noise-scheme", scheme, "--noise-gamma", gamma, "--save-dir", folder]
        run.queue(steps.Step("train", folder, cmd + ["--lr-scheduler", "paper_halving"]))
        run.queue(
            steps.Step(
                "evaluate",
                f"{folder}/valid.eval.log",
                evaluate + ["--path", f"{folder}/checkpoint_best.pt", "--gen-subset", "valid"],
            )
        )
    run_queue(queue, "ptb.sh", *budget)
    for scheme in dict.fromkeys(s for s, _ in script):
        folders = [f for (s, _), f in runs.items() if s == scheme]
        best = run_folders.best_run(folders, dry_run=False, prog="ptb.sh")
        if best:
            run.queue(
                steps.Step(
                    "evaluate",
                    f"{best}/test.eval.log",
                    evaluate + ["--path", f"{best}/checkpoint_best.pt", "--gen-subset", "test"],
                )
            )
    run_queue(queue, "ptb.sh")
    return runs, data


LM_SCRIPT = {
    ("none", "0"): (
        [(1, (300.0, 200.0)), (2, (150.5, 140.25)), (2, (151.0, 141.0)), (3, (120.0, 131.0))],
        130.0,
        127.5,
    ),
    ("blank", "0.1"): ([(1, (310.0, 205.0))], 125.0, 122.0),
    ("blank", "0.2"): ([(1, (320.0, 210.0))], 125.0, 999.0),  # a tie: the first gamma_0 wins
    ("kn", "0.2"): ([(1, (400.0, 210.0)), (2, (190.0, 150.0))], 120.5, 999.0),
    ("kn", "0.4"): (
        [(1, (420.0, 215.0), 1), (2, (200.0, 149.0), 0.5), (3, (170.0, 129.5), 0.25)],
        119.0,
        116.0,
    ),
}


def test_the_lm_page_is_written_from_the_runs(fake, no_drawing, tmp_path, capsys):
    runs, data = lm_pipeline(tmp_path, fake, LM_SCRIPT)
    out = tmp_path / "results" / "ptb-medium.md"
    report.main(
        [
            "write",
            "--prog",
            "ptb.sh",
            "ptb-medium",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--data",
            str(REPO.parent / "shared/data/ptb"),
            "--settings",
            "SIZE=medium",
            "SCHEMES=none blank kn",
            "HIDDEN=",
            "--prepared",
            str(data),
            "--runs",
            *runs.values(),
        ]
    )
    page = out.read_text()
    assert page in capsys.readouterr().out
    rows = table_rows(page)
    assert rows[:4] == [
        "| Noising scheme | gamma_0 | Validation | Test | Paper validation | Paper test |",
        "| none | 0 | 130.00 | 127.50 | 84.3 | 80.4 |",
        "| blank | 0.1 | 125.00 | 122.00 | 82.7 | 78.8 |",
        "| bigram Kneser-Ney | 0.4 | 119.00 | 116.00 | 79.9 | 76.9 |",
    ]
    # the epochs are the distinct epochs validated (none resumed in epoch 2), the halvings the
    # learning rate's drops, the wall time the last epoch's (none: 307 s; kn 0.2: 207 s)
    assert rows[4:10] == [
        "| scheme | gamma_0 | Validation | epochs validated | halvings | wall time | training |",
        "| none | 0 | 130.00 | 3 | 0 | 5 min | end of the protocol (all halvings done, epoch 3) |",
        "| blank | 0.1 | 125.00 | 1 | 0 | 2 min | end of the protocol (all halvings done, epoch 1) |",
        "| blank | 0.2 | 125.00 | 1 | 0 | 2 min | end of the protocol (all halvings done, epoch 1) |",
        "| kn | 0.2 | 120.50 | 2 | 0 | 3 min | end of the protocol (all halvings done, epoch 2) |",
        "| kn | 0.4 | 119.00 | 3 | 2 | 5 min | end of the protocol (all halvings done, epoch 3) |",
    ]
    assert (
        "Reached the end of the training protocol: none-g0, blank-g0.1, blank-g0.2, kn-g0.2, "
        "kn-g0.4." in page
    )
    assert (
        "time of training (fairseq's `wall`, summed over resumptions) on NVIDIA H100 80GB HBM3,"
        in page
    )
    assert "Settings: SIZE=medium SCHEMES='none blank kn'." in page
    assert (
        "Data: ../shared/data/ptb." in page
        and "# Penn Treebank, medium model (paper Table 2)" in page
    )
    # Figure 1: none against the chosen kn run, with the numbers of their logs (the last of a
    # repeated epoch), in the page and in the .json
    assert {k: v for k, v in no_drawing["runs"].items()} == {
        "none": ({1: 300.0, 2: 151.0, 3: 120.0}, {1: 200.0, 2: 141.0, 3: 131.0}),
        "kn gamma_0 0.4": ({1: 420.0, 2: 200.0, 3: 170.0}, {1: 215.0, 2: 149.0, 3: 129.5}),
    }
    assert no_drawing["path"] == str(tmp_path / "results" / "ptb-medium-curves.png")
    numbers = json.loads((tmp_path / "results" / "ptb-medium-curves.json").read_text())["runs"]
    assert numbers["kn gamma_0 0.4"]["valid_ppl"] == {"1": 215.0, "2": 149.0, "3": 129.5}
    assert numbers["none"]["path"].endswith("results/ptb-medium-logs/none-g0.train.log")
    assert "| kn gamma_0 0.4 | 3 | 170.00 | 129.50 |" in rows
    assert "![training and validation curves](ptb-medium-curves.png)" in page
    logs = tmp_path / "results" / "ptb-medium-logs"
    assert sorted(p.name for p in logs.iterdir()) == [
        "blank-g0.1.train.log",
        "blank-g0.2.train.log",
        "kn-g0.2.train.log",
        "kn-g0.4.train.log",
        "none-g0.train.log",
    ]
    assert (logs / "kn-g0.4.train.log").read_text() == train_log(
        "kn", "0.4", LM_SCRIPT["kn", "0.4"][0], gpu=H100
    )
    # every command, as it ran, with repository-relative paths
    commands = page[page.index("## Commands") :]
    kn = runs["kn", "0.4"]
    assert (
        f"    .venv/bin/fairseq-preprocess --only-source --trainpref ../shared/data/ptb/ptb.train.txt "
        f"--destdir {data}\n"
    ) in commands
    assert (
        f"    .venv/bin/fairseq-train {data} --user-dir fairseq_noising --noise-scheme kn "
        f"--noise-gamma 0.4 --save-dir {kn} --lr-scheduler paper_halving\n"
    ) in commands
    assert (
        f"    .venv/bin/fairseq-eval-lm {data} --user-dir fairseq_noising --path {kn}/checkpoint_best.pt "
        f"--gen-subset test > {kn}/test.eval.log 2>&1\n"
    ) in commands
    assert commands.count("--gen-subset valid") == 5 and commands.count("--gen-subset test") == 3
    assert commands.count("fairseq-train ") == 5
    assert_no_machine_path(page)


def lm_page(tmp_path, runs, data, *extra):
    """report.py write of a PTB medium page; returns (exit status or SystemExit, page text)."""
    out = tmp_path / "results" / "ptb-medium.md"
    argv = ["write", "--prog", "ptb.sh", "ptb-medium", "--out", str(out), "--device", "cuda"]
    argv += ["--data", "ptb", "--settings", "SIZE=medium", *extra]
    argv += ["--prepared", str(data), "--runs", *runs.values()]
    try:
        status = report.main(argv)
    except SystemExit as e:
        status = e
    return status, out.read_text()


def test_a_failed_run_is_on_the_page_beside_the_results_of_the_others(
    fake, no_drawing, tmp_path, capsys
):
    fake.failing[str(tmp_path / "medium" / "kn-g0.2")] = 1
    runs, data = lm_pipeline(tmp_path, fake, LM_SCRIPT)
    out = capsys.readouterr().out
    # the failed run's evaluation is skipped; every other run trains and is evaluated
    assert "ptb.sh: kn-g0.2: FAILED (exit 1: RuntimeError: CUDA out of memory)" in out
    assert "ptb.sh: kn-g0.2/valid.eval.log: skipped (what it needs did not finish)" in out
    evaluated = [c[c.index("--path") + 1] for c in fake.calls if "--path" in c]
    assert f"{runs['kn', '0.2']}/checkpoint_best.pt" not in evaluated
    assert f"{runs['kn', '0.4']}/checkpoint_best.pt" in evaluated  # kn's chosen run: its test
    status, page = lm_page(tmp_path, runs, data)
    assert isinstance(status, SystemExit)  # the page is written, then the command says it failed
    assert (
        "ptb.sh: 1 of 5 trainings failed: kn-g0.2 (exit 1: RuntimeError: CUDA out of memory)"
        in (capsys.readouterr().err)
    )
    rows = table_rows(page)
    assert "| bigram Kneser-Ney | 0.4 | 119.00 | 116.00 | 79.9 | 76.9 |" in rows
    assert (
        "| kn | 0.2 | — | 0 | 0 | — | FAILED (exit 1: RuntimeError: CUDA out of memory) |" in rows
    )
    assert (
        "Reached the end of the training protocol: none-g0, blank-g0.1, blank-g0.2, kn-g0.4."
        in page
    )
    # a scheme whose every run failed has no chosen run, and says so in the table
    for gamma in ("0.1", "0.2"):
        fake.failing[str(tmp_path / "again" / "medium" / f"blank-g{gamma}")] = 1
    (tmp_path / "again").mkdir()
    runs, data = lm_pipeline(tmp_path / "again", fake, LM_SCRIPT)
    _, page = lm_page(tmp_path / "again", runs, data)
    assert "| blank | — | failed | — | 82.7 | 78.8 |" in table_rows(page)


def test_runs_stopped_by_the_time_budget_are_evaluated_and_marked(fake, no_drawing, tmp_path):
    script = {k: v for k, v in LM_SCRIPT.items() if k[0] in ("none", "kn")}
    for key in script:
        fake.stopped_by_time.add(str(tmp_path / "medium" / f"{key[0]}-g{key[1]}"))
    budget = ["--time-budget", "10m", "--started", str(time.time()), "--reserve", "150s"]
    runs, data = lm_pipeline(tmp_path, fake, script, budget=budget)
    trainings = [c for c in fake.calls if "fairseq-train" in c[0]]
    hours = {float(c[c.index("--stop-time-hours") + 1]) for c in trainings}
    # 10 min minus the reserve and the time a training needs to start and to end
    assert all(abs(h * 3600 - (600 - 150 - rows.STARTUP)) < 30 for h in hours), hours
    for folder in runs.values():
        assert Path(folder, ".budget").is_file() and not Path(folder, ".done").exists()
    status, page = lm_page(tmp_path, runs, data, "TIME_BUDGET=10m")
    assert status == 0
    table = table_rows(page)
    assert "| none | 0 | 130.00† | 127.50† | 84.3 | 80.4 |" in table  # not the paper's figure
    assert "| bigram Kneser-Ney | 0.4 | 119.00† | 116.00† | 79.9 | 76.9 |" in table
    assert (
        "| kn | 0.4 | 119.00 | 3 | 2 | 5 min | stopped by the time budget after epoch 3, lr 0.25, "
        "2 of 8 halvings |" in table
    )
    assert "Reached the end of the training protocol: no run." in page
    assert "time budget 10m (each training got fairseq's `--stop-time-hours`" in page


def test_a_page_written_while_runs_train_shows_where_each_one_is(fake, no_drawing, tmp_path):
    """Three runs: one finished and evaluated, one in its third epoch, one not started."""
    script = {("none", "0"): LM_SCRIPT["none", "0"]}
    runs, data = lm_pipeline(tmp_path, fake, script)
    training, waiting = tmp_path / "medium" / "kn-g0.2", tmp_path / "medium" / "kn-g0.4"
    for folder in (training, waiting):
        folder.mkdir()
        (folder / ".command").write_text(
            f"fairseq-train x --noise-scheme kn --noise-gamma {folder.name[4:]} "
            "--lr-scheduler paper_halving --halvings 8"
        )
    epochs = [(1, (400.0, 210.0)), (2, (190.0, 150.0), 0.5)]
    log = train_log("kn", "0.2", epochs, gpu=H100, complete=False)
    log += (
        "2026-01-01 | INFO | fairseq_noising.optim.paper_halving | paper_halving: epoch 2: valid "
    )
    log += "loss 7 does not improve on 6 (epoch 1); halving 1/8: lr 0.5 -> 0.25\n"
    log += "2026-01-01 | INFO | train_inner | epoch 003:      5 / 20 loss=9, ups=3.5, lr=0.25\n"
    (training / "train.log").write_text(log)
    runs.update({("kn", "0.2"): str(training), ("kn", "0.4"): str(waiting)})
    status, page = lm_page(tmp_path, runs, data, "--partial")
    assert status == 0 and "**In progress**" in page and "1 of 3 trainings have ended" in page
    table = table_rows(page)
    assert "| none | 0 | 130.00 | 127.50 | 84.3 | 80.4 |" in table
    assert "| bigram Kneser-Ney | — | training/waiting | — | 79.9 | 76.9 |" in table
    # the last validation in training, marked as such, and where the run is
    assert (
        "| kn | 0.2 | 150.00* | 2 | 1 | 3 min | training, in epoch 3 (25% of it), lr 0.25, "
        "1 of 8 halvings |" in table
    )
    assert "| kn | 0.4 | — | 0 | 0 | — | waiting to start |" in table
    assert "![training and validation curves](ptb-medium-curves.png)" in page  # kn's best so far
    assert set(no_drawing["runs"]) == {"none", "kn gamma_0 0.2"}
    assert "kn-g0.2.train.log" in os.listdir(tmp_path / "results" / "ptb-medium-logs")


def test_a_page_without_a_kn_run_has_no_figure_and_a_missing_evaluation_is_named(
    fake, no_drawing, tmp_path, capsys
):
    script = {k: v for k, v in LM_SCRIPT.items() if k[0] != "kn"}
    runs, data = lm_pipeline(tmp_path, fake, script)
    out = tmp_path / "ptb-small.md"
    args = [
        "write",
        "--prog",
        "ptb.sh",
        "ptb-small",
        "--out",
        str(out),
        "--device",
        "cuda",
        "--data",
        "ptb",
        "--prepared",
        str(data),
        "--runs",
        *runs.values(),
    ]
    report.main(args)
    page = out.read_text()
    assert (
        "Figure 1" not in page
        and no_drawing == {}
        and not (tmp_path / "ptb-small-curves.png").exists()
    )
    assert "| none | 0 | 130.00 | 127.50 | — | — |" in page  # no small model in the paper
    assert "(device: cuda)" in page
    os.remove(os.path.join(runs["blank", "0.1"], "test.eval.log"))
    with pytest.raises(SystemExit):
        report.main(args)
    assert (
        f"ptb.sh: no test perplexity in {runs['blank', '0.1']}/test.eval.log"
        in capsys.readouterr().err
    )


def test_the_analysis_section_shows_figure_3_and_table_6_beside_the_paper(tmp_path, capsys):
    analysis = tmp_path / "analysis"
    analysis.mkdir()
    kl = [
        dict(label="none", gamma=0.0, kl_uniform=4.64882, kl_unigram=1.97071, ppl=134.0381),
        dict(label="kn", gamma=0.2, kl_uniform=4.46084, kl_unigram=1.79904, ppl=130.5712),
    ]
    unseen = [
        dict(label=m["label"], gamma=m["gamma"], all_ppl=m["ppl"], all_positions=73759)
        | dict(bigram_ppl=b, bigram_positions=15000, trigram_ppl=t, trigram_positions=43000)
        for m, b, t in zip(kl, (2900.555, 2700.0), (390.0, 370.125))
    ]
    for what, models in (("kl", kl), ("unseen", unseen)):
        (analysis / f"{what}.json").write_text(json.dumps({"split": "valid", "models": models}))
        (analysis / f"{what}.png").write_bytes(b"png of " + what.encode())
    out = tmp_path / "ptb-medium-analysis"
    lines = analysis_section.section(str(analysis), str(out), "ptb.sh")
    rows = table_rows("\n".join(lines))
    assert rows == [
        "| scheme | gamma_0 | KL uniform | KL unigram | perplexity |",
        "| none | 0 | 4.6488 | 1.9707 | 134.04 |",
        "| kn | 0.2 | 4.4608 | 1.7990 | 130.57 |",
        "| scheme | gamma_0 | all | unseen bigrams | positions | unseen trigrams | positions | "
        "paper bigrams | paper trigrams |",
        "| none | 0 | 134.04 | 2900.55 | 15000 | 390.00 | 43000 | 2881 | 381 |",
        "| kn | 0.2 | 130.57 | 2700.00 | 15000 | 370.12 | 43000 | — | — |",
    ]
    assert "73759 positions" in "\n".join(lines)
    assert (out / "unseen.png").read_bytes() == b"png of unseen" and (out / "kl.json").is_file()
    assert "![unseen n-grams](ptb-medium-analysis/unseen.png)" in lines
    os.remove(analysis / "unseen.json")
    with pytest.raises(SystemExit):
        analysis_section.section(str(analysis), str(out), "ptb.sh")
    assert (
        f"ptb.sh: no unseen analysis in {analysis}/unseen.json: did the analysis step run?"
        in capsys.readouterr().err
    )


MT_SCRIPT = {  # (row, gamma) -> (valid ppl, (BLEU, tok BLEU))
    ("none", "0"): (44.89, (4.31, 4.35)),
    ("kn", "0.1"): (52.0, (9.0, 9.0)),
    ("kn", "0.2"): (51.03, (3.64, 3.66)),
    ("kn:source", "0.2"): (49.49, (3.53, 3.50)),
}


def mt_pipeline(tmp_path, fake, script, spm=False):
    """The steps of recipes/multi30k.sh on fake fairseq."""
    queue = tmp_path / "queue"
    run = steps.Steps("multi30k.sh", dry_run=False, queue=str(queue))
    tok = tmp_path / "tok"
    run.prepare(
        str(tok), ["python", "recipes/prepare_translation.py", "tokenize-dir", "--outdir", str(tok)]
    )
    (tok / "tokenizer").write_text("moses\n")
    data = tmp_path / "data-bin"
    run.prepare(str(data), [f"{FAKE_BIN}/fairseq-preprocess", "--destdir", str(data)])
    runs = {}
    for (row, gamma), (valid, bleu) in script.items():
        scheme, _, side = row.partition(":")
        folder = str(tmp_path / "runs" / f"{row.replace(':', '-')}-g{gamma}")
        runs[row, gamma] = folder
        fake.train_logs[folder] = train_log(scheme, gamma, [(1, (90.0, 60.0))], complete=False)
        fake.perplexity[(folder, "valid")] = valid
        fake.bleu[folder] = (bleu[0], None if spm else bleu[1])
        cmd = [f"{FAKE_BIN}/fairseq-train", str(data), "--noise-scheme", scheme]
        cmd += ["--noise-gamma", gamma, "--noise-side", side or "both", "--save-dir", folder]
        run.queue(steps.Step("train", folder, cmd))
        validate = [
            f"{FAKE_BIN}/fairseq-validate",
            str(data),
            "--path",
            f"{folder}/checkpoint_best.pt",
        ]
        run.queue(steps.Step("evaluate", f"{folder}/valid.eval.log", validate))
    run_queue(queue, "multi30k.sh")
    for row in dict.fromkeys(r for r, _ in script):
        folders = [f for (r, _), f in runs.items() if r == row]
        best = run_folders.best_run(folders, dry_run=False, prog="multi30k.sh")
        generate = [
            f"{FAKE_BIN}/fairseq-generate",
            str(data),
            "--path",
            f"{best}/checkpoint_best.pt",
        ]
        run.queue(steps.Step("evaluate", f"{best}/test.gen", generate + ["--gen-subset", "test"]))
        score = ["python", "recipes/prepare_translation.py", "score"]
        score += ["--generate-output", f"{best}/test.gen", "--detok", f"{best}/test.detok"]
        run.queue(steps.Step("evaluate", f"{best}/test.bleu", score))
    run_queue(queue, "multi30k.sh")
    return runs, [str(tok), str(data)]


def test_the_translation_page_is_written_from_the_runs(fake, tmp_path, capsys):
    runs, prepared = mt_pipeline(tmp_path, fake, MT_SCRIPT)
    out = tmp_path / "multi30k.md"
    report.main(
        [
            "write",
            "multi30k",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--data",
            "m30k",
            "--settings",
            "ROWS=none kn kn:source",
            "NWORDS=50000",
            "TOKENIZER=auto",
            "SPM=0",
            "--prepared",
            *prepared,
            "--runs",
            *runs.values(),
        ]
    )
    page = out.read_text()
    rows = table_rows(page)
    assert rows[:4] == [
        "| Scheme | gamma_0 | Perplexity | BLEU | tok BLEU | Paper perplexity | Paper BLEU |",
        "| none | 0 | 44.89 | 4.31 | 4.35 | 8.84 | 24.6 |",
        "| bigram Kneser-Ney | 0.2 | 51.03 | 3.64 | 3.66 | 7.92 | 26 |",
        "| bigram Kneser-Ney, source only | 0.2 | 49.49 | 3.53 | 3.50 | 8.74 | 24.8 |",
    ]
    # no halvings column for runs without paper_halving; the fake logs say "on CPU"
    ended = "end of the protocol (--max-epoch, epoch 1)"  # not paper_halving: its cap ends it
    assert f"| kn | 0.1 | 52.00 | 1 | — | 2 min | {ended} |" in rows
    assert f"| kn:source | 0.2 | 49.49 | 1 | — | 2 min | {ended} |" in rows
    assert "wall time of training (fairseq's `wall`, summed over resumptions) on CPU," in page
    assert (
        "sacrebleu signatures: BLEU `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp`; "
        "tok BLEU `nrefs:1|case:mixed|eff:no|tok:none`."
    ) in page
    assert "Vocabulary: words, top 50000 per language, tokenizer moses." in page
    logs = tmp_path / "multi30k-logs"
    assert sorted(p.name for p in logs.iterdir()) == [
        "kn-g0.1.train.log",
        "kn-g0.2.test.detok",
        "kn-g0.2.train.log",
        "kn-source-g0.2.test.detok",
        "kn-source-g0.2.train.log",
        "none-g0.test.detok",
        "none-g0.train.log",
    ]
    assert (logs / "kn-g0.2.test.detok").read_text() == "detokenized output of kn-g0.2\n"
    commands = page[page.index("## Commands") :]
    kn = runs["kn", "0.2"]
    assert (
        f"    .venv/bin/fairseq-generate {tmp_path}/data-bin --path {kn}/checkpoint_best.pt "
        f"--gen-subset test > {kn}/test.gen 2>&1\n"
    ) in commands
    assert (
        f"--generate-output {kn}/test.gen --detok {kn}/test.detok > {kn}/test.bleu 2>&1\n"
        in commands
    )
    assert "    python recipes/prepare_translation.py tokenize-dir" in commands


def test_sentencepiece_pages_have_no_tokenized_bleu(fake, tmp_path):
    script = {k: v for k, v in MT_SCRIPT.items() if k[0] == "none"}
    runs, prepared = mt_pipeline(tmp_path, fake, script, spm=True)
    out = tmp_path / "iwslt15-spm.md"
    report.main(
        [
            "write",
            "iwslt15",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--data",
            "de-en.tgz",
            "--settings",
            "VALID_SET=tst2012",
            "TEST_SET=tst2014",
            "SPM=1",
            "SPM_VOCAB=8000",
            "SPM_JOINT=1",
            "--prepared",
            *prepared,
            "--runs",
            *runs.values(),
        ]
    )
    page = out.read_text()
    assert "| none | 0 | 44.89 | 4.31 | — | 8.84 | 24.6 |" in table_rows(page)
    assert "Vocabulary: sentencepiece (unigram, 8000 pieces, joint)." in page
    assert (
        "(valid = tst2012, test = tst2014)" in page and "# IWSLT'15 En-De (paper Table 4)" in page
    )


def test_results_pages_hold_no_machine_paths():
    pages = sorted((REPO / "results").rglob("*.md"))
    assert pages
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "/work/" not in text, page
        assert_no_machine_path(text)
