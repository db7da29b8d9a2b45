"""The recipe scripts (recipes/*.sh): data preparation, one sweep, the page, on slices of the real
data; and the one line with which each refuses a setting before anything runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CLI_ENV, REPO, head_lines, require_shared

VENV = str(Path(sys.executable).parent.parent)  # the environment running the tests
TINY = ["model.hidden_size=16", "optimization.max_epoch=1", "optimization.max_update=5"]


def recipe(name, *args, env=None, timeout=900):
    return subprocess.run(
        ["bash", str(REPO / "recipes" / name), *args],
        cwd=REPO,
        env={**CLI_ENV, "VENV": VENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "name,args,env,line",
    [
        ("ptb.sh", [], {"SIZE": "huge"}, "ptb.sh: SIZE must be small, medium or large, got 'huge'"),
        (
            "ptb.sh",
            ["--dry-run"],
            {},
            "ptb.sh: unknown option --dry-run (expected --help, or Hydra",
        ),
        (
            "ptb.sh",
            [],
            {"PTB_DIR": "/nonexistent"},
            "ptb.sh: PTB_DIR=/nonexistent lacks ptb.train.txt",
        ),
        (
            "quickstart.sh",
            [],
            {"PTB_DIR": "{ptb}", "TIME_BUDGET": "25m"},
            "quickstart.sh: TIME_BUDGET must be hours (e.g. 0.5) above EVAL_RESERVE, got '25m'",
        ),
        (
            "quickstart.sh",
            [],
            {"VENV": "/nonexistent"},
            "quickstart.sh: /nonexistent/bin/fairseq-hydra-train",
        ),
    ],
)
def test_a_recipe_refuses_a_setting_with_one_line(name, args, env, line, tmp_path):
    ptb = tmp_path / "ptb"
    ptb.mkdir()
    for split in ("train", "valid", "test"):
        (ptb / f"ptb.{split}.txt").write_text("a b c\n")
    env = {k: v.replace("{ptb}", str(ptb)) for k, v in env.items()}
    proc = recipe(name, *args, env={"WORK": str(tmp_path / "work"), **env})
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith(line), proc.stderr[-2000:]
    assert not list((tmp_path / "work").glob("**/row.json"))  # nothing trained


def test_every_recipe_has_help():
    for name in ("quickstart.sh", "ptb.sh", "text8.sh", "multi30k.sh", "iwslt15_en_de.sh"):
        proc = recipe(name, "--help")
        assert proc.returncode == 0 and "OVERRIDE" in proc.stdout, name


@pytest.mark.slow
def test_the_quickstart_trains_both_rows_and_writes_the_page(tmp_path):
    ptb = tmp_path / "ptb"
    ptb.mkdir()
    for split, n in (("train", 300), ("valid", 20), ("test", 7)):
        head_lines(require_shared("ptb") / f"ptb.{split}.txt", ptb / f"ptb.{split}.txt", n)
    work = tmp_path / "work"
    proc = recipe("quickstart.sh", *TINY, env={"PTB_DIR": str(ptb), "WORK": str(work)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (work / "results.md").read_text()
    assert "Quick start" in page and (work / "results-curves.png").is_file()
    for name in ("none-g0", "kn-g0.2"):
        record = json.loads((work / name / "row.json").read_text())
        assert record["status"] == "ended" and record["evaluation"]["test_ppl"] > 1
        assert record["config"]["model"]["_name"] == "noising_lstm_lm_small"  # the CPU default
    # run again: the data is not prepared twice, each row resumes and keeps its evaluation
    again = recipe("quickstart.sh", *TINY, env={"PTB_DIR": str(ptb), "WORK": str(work)})
    assert again.returncode == 0 and "fairseq-preprocess" not in again.stdout + again.stderr


@pytest.mark.slow
def test_the_multi30k_recipe_scores_bleu_against_the_raw_references(tmp_path):
    m30k = tmp_path / "m30k"
    m30k.mkdir()
    for split, n in (("train", 300), ("val", 20), ("test", 20)):
        for lang in ("en", "de"):
            head_lines(require_shared("multi30k") / f"{split}.{lang}", m30k / f"{split}.{lang}", n)
    work, results = tmp_path / "work", tmp_path / "results"
    rows = "task={noise_scheme:none,noise_side:both,noise_gamma:0},{noise_scheme:kn,noise_side:target,noise_gamma:0.2}"
    env = {"MULTI30K_DIR": str(m30k), "WORK": str(work), "RESULTS_DIR": str(results)}
    gen = "hydra.callbacks.row.generate_args=[--max-len-b,5]"
    proc = recipe("multi30k.sh", *TINY, rows, gen, env={**env, "CONFIG": "multi30k_cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (work / "raw" / "test.de").read_text() == (m30k / "test.de").read_text().rstrip(
        "\n"
    ) + "\n"
    record = json.loads((work / "multi30k_cpu" / "kn-target-g0.2" / "row.json").read_text())
    assert record["key"] == "kn:target" and "bleu" in record["evaluation"]
    assert record["evaluation"]["bleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    page = (results / "multi30k-cpu.md").read_text()
    assert "bigram Kneser-Ney, target only" in page and "sacrebleu signatures" in page
