"""recipes/gpu_window.sh: one call of a GPU window (here on the CPU, MPS=0, tiny rows): both
tables trained from a prepared GPU_DIR, the rows, pages and log copied into OUT; a second call
skips the ended rows; and the one line with which it refuses a setting before anything runs."""

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import CLI_ENV, REPO, binarize_translation

from fairseq_noising.sweep import record

VENV = str(Path(sys.executable).parent.parent)  # the environment running the tests
TINY = ["++model.hidden_size=16", "optimization.max_epoch=1"]
PTB_ROWS = ("none-g0-s1", "kn-g0.2-s1")
MT_ROW = "{noise_scheme:unigram,noise_side:both,noise_gamma:0.2}"  # one row, one seed: quick


def window(env, *args, timeout=900):
    return subprocess.run(
        ["bash", str(REPO / "recipes" / "gpu_window.sh"), *args],
        cwd=REPO,
        env={**CLI_ENV, "VENV": VENV, "MPS": "0", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "env,line",
    [
        ({"OUT": ""}, "gpu_window.sh: OUT must name the folder"),
        ({"TIME_BUDGET": "15m"}, "gpu_window.sh: TIME_BUDGET must be the hours of this call"),
        (
            {"VENV": "{tmp}/none"},
            "gpu_window.sh: {tmp}/none/bin/fairseq-hydra-train not found and no wheelhouse in",
        ),
        ({}, "gpu_window.sh: {tmp}/gpu/ptb/data-bin/dict.txt not found: build GPU_DIR's data"),
    ],
    ids=["OUT", "TIME_BUDGET", "wheelhouse", "data"],
)
def test_a_window_refuses_a_setting_with_one_line_before_anything_runs(env, line, tmp_path):
    base = {"OUT": str(tmp_path / "out"), "TIME_BUDGET": "0.1", "GPU_DIR": str(tmp_path / "gpu")}
    env = {k: v.replace("{tmp}", str(tmp_path)) for k, v in {**base, **env}.items()}
    proc = window(env)
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr  # one line
    assert proc.stderr.startswith(line.replace("{tmp}", str(tmp_path))), proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "none").exists()


@pytest.mark.slow
def test_a_window_trains_both_tables_copies_them_out_and_resumes(tmp_path, ptb_tiny_bin):
    gpu = tmp_path / "gpu"  # what the README builds with DATA_ONLY=1, from slices
    shutil.copytree(ptb_tiny_bin, gpu / "ptb" / "data-bin")
    m30k = binarize_translation(tmp_path / "m30k", 20, 20)
    shutil.copytree(m30k, gpu / "multi30k" / "data-bin")
    for name in ("raw", "tok"):  # the references: words as they are
        shutil.copytree(m30k.parent / "raw", gpu / "multi30k" / name)
    env = {"GPU_DIR": str(gpu), "TIME_BUDGET": "0.5", "MT_ROWS": MT_ROW, "MT_SEEDS": "2"}

    first = window({**env, "OUT": str(tmp_path / "out1")}, *TINY)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = tmp_path / "out1"
    assert sorted(p.name for p in out.iterdir()) == [
        "multi30k.md",
        "ptb-medium.md",
        "window.log",
        "window.tar.gz",
    ]
    assert all(p.stat().st_size < 16 << 20 for p in out.iterdir())
    log = (out / "window.log").read_text()
    assert f"{VENV}/bin/fairseq-hydra-train found: nothing to install" in log
    assert "hydra.launcher.n_jobs=2" in log and "hydra.launcher.n_jobs=1" in log  # rows at once
    with tarfile.open(out / "window.tar.gz") as tar:
        names = set(tar.getnames())
    assert not [n for n in names if n.endswith(".pt")]
    assert {"pages/ptb-medium.md", "pages/multi30k.md"} <= names
    rows = [f"ptb/medium/{r}" for r in PTB_ROWS] + ["multi30k/multi30k/unigram-both-g0.2-s2"]
    assert {f"{r}/row.json" for r in rows} <= names
    for r in rows:
        assert record.read(str(gpu / r))["status"] == "ended", r
    assert "validate_interval_updates: 0" in (gpu / rows[0] / ".hydra/config.yaml").read_text()

    # again, with no time for Table 4: the ended rows are left as they are
    # their records, progress, evaluations and checkpoints (Hydra's job log gets a launch more)
    files = [p for r in rows for p in (gpu / r).glob("*") if p.name != "hydra_train.log"]
    kept = {p: p.read_bytes() for p in files if p.is_file()}
    again = window({**env, "OUT": str(tmp_path / "out2"), "MIN_NEXT": "1000"}, *TINY)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    output = again.stdout + again.stderr
    for r in PTB_ROWS:
        assert f"row {r}: capped by --max-epoch" in output and "nothing to train" in output
    assert "Table 4's rows wait for the next call" in output
    assert [p.name for p in kept if p.read_bytes() != kept[p]] == []
    log = (tmp_path / "out2" / "window.log").read_text()
    assert log.count("== gpu_window.sh") == 4  # both calls' start and end
    assert (tmp_path / "out2" / "multi30k.md").read_bytes() == (out / "multi30k.md").read_bytes()
