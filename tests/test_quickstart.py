"""recipes/quickstart.sh (the README's main job): its plans per device, a tiny real run with its
progress lines, table and figure, and its one-line errors."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, head_lines, require_shared

sys.path.insert(0, str(REPO / "recipes"))
import quickstart  # noqa: E402


def quickstart_sh(*args, env=None, timeout=600):
    environ = {**os.environ, "VENV": str(Path(sys.executable).parent.parent), **(env or {})}
    return subprocess.run(["bash", "recipes/quickstart.sh", *args], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tiny_ptb(tmp_path_factory):
    ptb = require_shared("ptb")
    folder = tmp_path_factory.mktemp("tiny_ptb")
    for split, n in (("train", 400), ("valid", 40), ("test", 40)):
        head_lines(ptb / f"ptb.{split}.txt", folder / f"ptb.{split}.txt", n)
    return folder


def test_cpu_plan_is_the_small_model_on_the_cpu(tiny_ptb, tmp_path):
    proc = quickstart_sh("--dry-run", env={"DEVICE": "cpu", "PTB_DIR": str(tiny_ptb),
                                           "WORK": str(tmp_path / "w")})
    assert proc.returncode == 0, proc.stderr
    train = [line for line in proc.stdout.splitlines() if "fairseq-train" in line]
    assert len(train) == 2 and all("--cpu" in line for line in train)
    assert all("--arch noising_lstm_lm_small" in line and "--max-epoch 5" in line for line in train)
    assert "--noise-scheme none" in train[0] and "--noise-scheme kn --noise-gamma 0.2" in train[1]
    for flag in ("--stateful-bptt", "--sentence-avg", "--lr 1.0", "--clip-norm 5",
                 "--lr-scheduler paper_halving --halvings 8 --stop-min-lr 0"):
        assert all(flag in line for line in train), flag
    assert not (tmp_path / "w" / "none").exists() or not any((tmp_path / "w" / "none").iterdir())


def test_gpu_plan_is_the_medium_model_to_the_end_of_the_protocol(tiny_ptb, tmp_path):
    proc = quickstart_sh("--dry-run", env={"DEVICE": "cuda", "PTB_DIR": str(tiny_ptb),
                                           "WORK": str(tmp_path / "w")})
    assert proc.returncode == 0, proc.stderr
    train = [line for line in proc.stdout.splitlines() if "fairseq-train" in line]
    assert len(train) == 2
    assert all("--arch noising_lstm_lm_medium" in line and "--cpu" not in line for line in train)
    assert all("--max-epoch 100" in line for line in train)
    evals = [line for line in proc.stdout.splitlines() if "fairseq-eval-lm" in line]
    assert len(evals) == 4 and all("--cpu" not in line for line in evals)


def test_device_auto_follows_torch(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert quickstart.choose_device("auto") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert quickstart.choose_device("auto") == "cpu"
    assert quickstart.choose_device("cpu") == "cpu"


@pytest.mark.parametrize("env, message", [
    ({"DEVICE": "cuda"}, "quickstart.sh: DEVICE=cuda but torch"),
    ({"DEVICE": "tpu"}, "quickstart.sh: DEVICE must be auto, cpu or cuda, got 'tpu'"),
    ({"DEVICE": "cpu", "PTB_DIR": "/nonexistent/ptb"}, "quickstart.sh: PTB_DIR=/nonexistent/ptb lacks ptb.train.txt"),
])
def test_bad_input_is_one_line(env, message, tmp_path):
    import torch

    if env.get("DEVICE") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")  # never the case in CI
    proc = quickstart_sh(env={**env, "WORK": str(tmp_path / "w")})
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("quickstart.sh:")]
    assert len(errors) == 1 and errors[0].startswith(message), proc.stderr
    assert not (tmp_path / "w" / "none").exists()


def test_progress_reads_the_epoch_and_its_share():
    log = "\n".join([
        "2026-11-22 13:09:39 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 266.2 | "
        "nll_loss 7.654 | ppl 201.39 | wps 6273.8",
        "2026-11-22 13:09:39 | INFO | train | epoch 001 | loss 294.1 | nll_loss 8.4 | ppl 338.49 | "
        "wps 1925.6 | lr 1 | gnorm 6.6",
        "2026-11-22 13:11:00 | INFO | train_inner | epoch 002:    332 / 1328 loss=250.0, ppl=150.0",
    ])
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"qs-progress-{os.getpid()}.log"
    path.write_text(log, encoding="utf-8")
    try:
        done, train, valid, lr = quickstart.progress(str(path), max_epoch=5)
    finally:
        path.unlink()
    assert done == pytest.approx(1.25) and train == 338.49 and valid == 201.39 and lr == "1"


def test_a_tiny_run_shows_progress_and_ends_with_a_table_and_a_figure(tiny_ptb, tmp_path):
    work = tmp_path / "w"
    env = {"DEVICE": "cpu", "PTB_DIR": str(tiny_ptb), "WORK": str(work), "EPOCHS": "2"}
    proc = quickstart_sh(env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"^\[\d\d:\d\d:\d\d\] none: .* \| kn: ", proc.stdout, re.M), proc.stdout[-2000:]
    assert re.search(r"none: 2 epochs done, train ppl [\d.]+, valid ppl [\d.]+", proc.stdout)
    table = (work / "results.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (none|kn) \| ([\d.]+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \|", table, re.M)
    assert [(r[0], r[1], r[2]) for r in rows] == [("none", "0", "2"), ("kn", "0.2", "2")]
    assert table in proc.stdout
    png = work / "curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert f"figure: {png}" in proc.stdout
    # the table's perplexities are those of fairseq-eval-lm on checkpoint_best.pt
    for name, _, _, valid, test in rows:
        for split, value in (("valid", valid), ("test", test)):
            log = (work / name / f"{split}.eval.log").read_text(encoding="utf-8")
            assert re.findall(r"Perplexity: ([\d.]+)", log)[-1].startswith(value[:-1])
    # a second start trains nothing and rewrites the same table
    again = quickstart_sh(env=env)
    assert again.returncode == 0
    assert not [line for line in again.stdout.splitlines() if line.startswith("+ ")
                and ("fairseq-train" in line or "fairseq-eval-lm" in line)]
    assert (work / "results.md").read_text(encoding="utf-8") == table
