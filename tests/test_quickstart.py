"""recipes/quickstart.sh (the README's main job): its plans per device, a tiny real run with its
status lines, table and figure, and its one-line errors (slow tier); the device choice and the
table written from synthetic logs, in process (fast tier)."""

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import REPO, head_lines, require_shared

sys.path.insert(0, str(REPO / "recipes"))
import quickstart  # noqa: E402
import steps  # noqa: E402


def quickstart_sh(*args, env=None, timeout=600):
    environ = {**os.environ, "VENV": str(Path(sys.executable).parent.parent), **(env or {})}
    return subprocess.run(
        ["bash", "recipes/quickstart.sh", *args],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def tiny_ptb(tmp_path_factory):
    ptb = require_shared("ptb")
    folder = tmp_path_factory.mktemp("tiny_ptb")
    for split, n in (("train", 400), ("valid", 40), ("test", 40)):
        head_lines(ptb / f"ptb.{split}.txt", folder / f"ptb.{split}.txt", n)
    return folder


# ---------------------------------------------------------------- fast tier


@pytest.fixture
def fake_torch(monkeypatch):
    """A torch module whose GPU the test switches on and off (importing torch takes seconds)."""
    torch = types.SimpleNamespace(
        __version__="2.13.0+cpu",
        version=types.SimpleNamespace(cuda=None),
        cuda=types.SimpleNamespace(is_available=lambda: False),
    )
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def test_device_auto_follows_torch(fake_torch, capsys):
    fake_torch.cuda.is_available = lambda: True
    assert steps.choose_device("auto", prog="quickstart.sh") == "cuda"
    fake_torch.cuda.is_available = lambda: False
    assert steps.choose_device("auto", prog="quickstart.sh") == "cpu"
    assert steps.choose_device("cpu", prog="quickstart.sh") == "cpu"
    # cuda without a GPU: the dry run shows the GPU plan with a warning, a real run stops
    assert steps.choose_device("cuda", dry_run=True, prog="quickstart.sh") == "cuda"
    assert "quickstart.sh: DEVICE=cuda but torch 2.13.0+cpu sees no GPU" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        steps.choose_device("cuda", prog="quickstart.sh")
    assert capsys.readouterr().err == (
        "quickstart.sh: DEVICE=cuda but torch 2.13.0+cpu sees no GPU (its CUDA: none (a CPU build))\n"
    )
    with pytest.raises(SystemExit):
        steps.choose_device("tpu", prog="quickstart.sh")
    assert capsys.readouterr().err == "quickstart.sh: DEVICE must be auto, cpu or cuda, got 'tpu'\n"


def test_the_table_is_written_from_the_logs(tmp_path, monkeypatch):
    """The README's CPU table, rebuilt from logs holding its numbers."""
    drawn = {}
    plots = types.SimpleNamespace(curves=lambda runs, path: drawn.update(runs=runs) or path)
    import fairseq_noising.analysis as analysis

    monkeypatch.setitem(sys.modules, "fairseq_noising.analysis.plots", plots)
    monkeypatch.setattr(analysis, "plots", plots, raising=False)
    work = tmp_path / "w"
    for name, gamma, (valid, test), epochs in (
        ("none", 0, (133.87, 130.84), [(338.5, 201.4), (150.4, 152.8), (98.9, 134.2)]),
        ("kn", 0.2, (130.39, 127.30), [(396.5, 205.8), (192.3, 156.5), (132.1, 130.7)]),
    ):
        run = work / name
        run.mkdir(parents=True)
        lines = [
            f"2026 | INFO | fairseq_cli.train | {{'noise_scheme': '{name}', 'noise_gamma': {gamma}}}"
        ]
        for epoch, (train_ppl, valid_ppl) in enumerate(epochs, 1):
            lines += [
                f"2026 | INFO | valid | epoch {epoch:03d} | valid on 'valid' subset | loss 7 | "
                f"ppl {valid_ppl} | wps 1",
                f"2026 | INFO | train | epoch {epoch:03d} | loss 8 | ppl {train_ppl} | wps 1",
            ]
        (run / "train.log").write_text("\n".join(lines) + "\n")
        (run / ".command").write_text(f"{REPO}/.venv/bin/fairseq-train data-bin --save-dir {run}")
        for split, ppl in (("valid", valid), ("test", test)):
            out = run / f"{split}.eval.log"
            out.write_text(
                f"2026 | INFO | fairseq_cli.eval_lm | Loss (base 2): 7.1, Perplexity: {ppl}\n"
            )
            (run / f"{split}.eval.log.done").write_text(
                f"fairseq-eval-lm data-bin --path {run}/checkpoint_best.pt --gen-subset {split} > {out} 2>&1"
            )
    table, path, _ = quickstart.report(str(work), str(work), ["none", "kn"], "Quick start")
    assert re.findall(r"^\|.*\|$", table, re.M)[2:] == [
        "| none | 0 | 3 | 133.87 | 130.84 | +0.00 | +0.00 |",
        "| kn | 0.2 | 3 | 130.39 | 127.30 | -3.48 | -3.54 |",
    ]
    assert Path(path).read_text() == table
    assert drawn["runs"] == {
        "none": ({1: 338.5, 2: 150.4, 3: 98.9}, {1: 201.4, 2: 152.8, 3: 134.2}),
        "kn (gamma_0 0.2)": ({1: 396.5, 2: 192.3, 3: 132.1}, {1: 205.8, 2: 156.5, 3: 130.7}),
    }
    assert f"    .venv/bin/fairseq-train data-bin --save-dir {work}/kn\n" in table
    assert (
        f"    fairseq-eval-lm data-bin --path {work}/kn/checkpoint_best.pt --gen-subset test "
        f"> {work}/kn/test.eval.log 2>&1\n"
    ) in table


# ---------------------------------------------------------------- slow tier


@pytest.mark.slow
def test_cpu_plan_is_the_small_model_on_the_cpu(tiny_ptb, tmp_path):
    proc = quickstart_sh(
        "--dry-run", env={"DEVICE": "cpu", "PTB_DIR": str(tiny_ptb), "WORK": str(tmp_path / "w")}
    )
    assert proc.returncode == 0, proc.stderr
    train = [line for line in proc.stdout.splitlines() if "fairseq-train" in line]
    assert len(train) == 2 and all("--cpu" in line for line in train)
    assert all("--arch noising_lstm_lm_small" in line and "--max-epoch 5" in line for line in train)
    assert "--noise-scheme none" in train[0] and "--noise-scheme kn --noise-gamma 0.2" in train[1]
    for flag in (
        "--stateful-bptt",
        "--sentence-avg",
        "--lr 1.0",
        "--clip-norm 5",
        "--lr-scheduler paper_halving --halvings 8 --stop-min-lr 0",
    ):
        assert all(flag in line for line in train), flag
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_gpu_plan_is_the_medium_model_to_the_end_of_the_protocol(tiny_ptb, tmp_path):
    proc = quickstart_sh(
        "--dry-run", env={"DEVICE": "cuda", "PTB_DIR": str(tiny_ptb), "WORK": str(tmp_path / "w")}
    )
    assert proc.returncode == 0, proc.stderr
    train = [line for line in proc.stdout.splitlines() if "fairseq-train" in line]
    assert len(train) == 2
    assert all("--arch noising_lstm_lm_medium" in line and "--cpu" not in line for line in train)
    assert all("--max-epoch 100" in line for line in train)
    evals = [line for line in proc.stdout.splitlines() if "fairseq-eval-lm" in line]
    assert len(evals) == 4 and all("--cpu" not in line for line in evals)


@pytest.mark.slow
@pytest.mark.parametrize(
    "env, message",
    [
        ({"DEVICE": "cuda"}, "quickstart.sh: DEVICE=cuda but torch"),
        ({"DEVICE": "tpu"}, "quickstart.sh: DEVICE must be auto, cpu or cuda, got 'tpu'"),
        (
            {"DEVICE": "cpu", "PTB_DIR": "/nonexistent/ptb"},
            "quickstart.sh: PTB_DIR=/nonexistent/ptb lacks ptb.train.txt",
        ),
        (
            {"DEVICE": "cpu", "GAMMA": "2", "PTB_DIR": "/nonexistent/ptb"},
            "quickstart.sh: GAMMA must be one gamma_0 value in [0, 1], got '2'",
        ),
        (
            {"DEVICE": "cpu", "EPOCHS": "five", "PTB_DIR": "/nonexistent/ptb"},
            "quickstart.sh: EPOCHS must be a whole number >= 1, got 'five'",
        ),
    ],
)
def test_bad_input_is_one_line(env, message, tmp_path):
    import torch

    if env.get("DEVICE") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")  # never the case in CI
    proc = quickstart_sh(env={**env, "WORK": str(tmp_path / "w")})
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("quickstart.sh:")]
    assert len(errors) == 1 and errors[0].startswith(message), proc.stderr
    assert not (tmp_path / "w" / "none").exists()


@pytest.mark.slow
def test_a_tiny_run_shows_progress_and_ends_with_a_table_and_a_figure(tiny_ptb, tmp_path):
    work = tmp_path / "w"
    env = {"DEVICE": "cpu", "PTB_DIR": str(tiny_ptb), "WORK": str(work), "EPOCHS": "2"}
    proc = quickstart_sh(env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # side by side, a status line per run: epoch, lr, halvings, last validation perplexity
    assert (
        "quickstart.sh: 2 trainings and 4 evaluations, 2 at a time, 1 threads each" in proc.stdout
    )
    assert re.search(r"^\[\d\d:\d\d:\d\d\]$", proc.stdout, re.M), proc.stdout[-2000:]
    assert re.search(
        r"^  none +epoch 2  lr [\d.]+  halvings \d/8  valid ppl [\d.]+  finished$",
        proc.stdout,
        re.M,
    )
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
    assert not [
        line
        for line in again.stdout.splitlines()
        if line.startswith("+ ") and ("fairseq-train" in line or "fairseq-eval-lm" in line)
    ]
    assert (work / "results.md").read_text(encoding="utf-8") == table
