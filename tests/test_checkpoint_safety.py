"""fairseq checkpoints load under torch's safe loader (``weights_only=True``) once the plugin is in.

Real CLI runs on small slices of the real data (PTB, Multi30k; see ``conftest.py``): stock
``lstm_lm``/``lstm`` models trained with ``fairseq-train --user-dir fairseq_noising``, then loaded
with plain ``torch.load``, ``fairseq-eval-lm``, ``fairseq-train`` (resume from
``checkpoint_last.pt``) and ``fairseq-generate``.
"""

import io
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import CLI_ENV, COMMON, TINY_LM, TINY_MT, lm_train_argv, mt_train_argv, run_cli
from score_kit import block_perplexity, generate_bleu, printed_perplexity

from fairseq_noising.checkpoint_safety import allow_fairseq_checkpoints

allow_fairseq_checkpoints()  # in this process, as importing a fairseq-side sub-package does

# one pytest-xdist worker: the module's fixtures (trained checkpoints) are built once
pytestmark = pytest.mark.xdist_group("checkpoint_safety")

# tiny models: one intra-op thread (CLI_ENV) runs them faster than several threads contending
# for a few cores


def _run(args, cwd):
    """Runs a console script of this venv; returns its output (stdout and stderr)."""
    proc = run_cli(args, cwd=cwd, env=CLI_ENV, timeout=600)
    return proc.stdout + proc.stderr


def _globals_stock_torch_refuses(path):
    """What ``get_unsafe_globals_in_checkpoint`` reports with no allow-list registered at all."""
    saved = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        return set(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    finally:
        torch.serialization.add_safe_globals(saved)


def _train_lm(data, save_dir, max_update, cwd):
    train = ["--optimizer", "adam", "--lr", 0.005, "--batch-size", 8, "--seed", 1]
    train += ["--max-update", max_update, "--save-interval-updates", 2, "--log-interval", 1]
    argv = lm_train_argv(
        data, *train, "--save-dir", save_dir, task="language_modeling", model=TINY_LM
    )
    return _run(["fairseq-train", *argv], cwd)


@pytest.fixture(scope="module")
def trained_lm(ptb_small_bin, tmp_path_factory):
    """A stock lstm_lm trained for 4 updates (checkpoints at 2 and 4 updates, best, last)."""
    work = tmp_path_factory.mktemp("ckpt_safety_lm")
    save_dir = work / "checkpoints"
    log = _train_lm(ptb_small_bin, save_dir, 4, work)
    for name in ("checkpoint_1_2.pt", "checkpoint_best.pt", "checkpoint_last.pt"):
        assert (save_dir / name).is_file(), f"{name} was not written:\n{log[-3000:]}"
    return {"data": ptb_small_bin, "save_dir": save_dir, "work": work}


@pytest.mark.slow
def test_lm_checkpoint_needs_the_allow_list(trained_lm):
    """The checkpoint really contains non-tensor globals, so the safe loader has work to do."""
    needed = _globals_stock_torch_refuses(trained_lm["save_dir"] / "checkpoint_1_2.pt")
    assert "argparse.Namespace" in needed
    # ... and, with the plugin's allow-list in place, nothing is left over
    assert not torch.serialization.get_unsafe_globals_in_checkpoint(
        str(trained_lm["save_dir"] / "checkpoint_1_2.pt")
    )


@pytest.mark.slow
def test_safe_torch_load_in_process(trained_lm):
    """After ``import fairseq_noising``, plain ``torch.load`` (weights_only by default) works."""
    for name in ("checkpoint_1_2.pt", "checkpoint_best.pt"):
        path = trained_lm["save_dir"] / name
        state = torch.load(path)
        assert torch.load(path, weights_only=True).keys() == state.keys()
        assert "decoder.embed_tokens.weight" in state["model"]
        assert state["extra_state"]["metrics"], "meters are saved in extra_state"
        assert state["extra_state"]["train_iterator"]["epoch"] == 1


_FRESH_PROCESS = r"""
import pickle, sys
from fairseq import checkpoint_utils   # stock fairseq, no plugin yet
path = sys.argv[1]
try:
    checkpoint_utils.load_checkpoint_to_cpu(path)
except pickle.UnpicklingError as e:
    assert "weights_only" in str(e) or "Weights only" in str(e), str(e)
    print("STOCK FAILED")
else:
    print("STOCK LOADED")
    sys.exit(3)
import fairseq_noising                  # the plugin, and nothing else, changes the outcome
import torch
torch.load(path)
state = checkpoint_utils.load_checkpoint_to_cpu(path)
print("PLUGIN LOADED", state["optimizer_history"][-1]["num_updates"])
"""


@pytest.mark.slow
def test_plugin_is_what_makes_it_load(trained_lm):
    """In a fresh interpreter stock fairseq cannot load the checkpoint; importing the plugin fixes it."""
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, str(trained_lm["save_dir"] / "checkpoint_1_2.pt")],
        capture_output=True,
        text=True,
        timeout=300,
        env=CLI_ENV,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "STOCK FAILED" in proc.stdout
    assert "PLUGIN LOADED 2" in proc.stdout


@pytest.mark.slow
def test_eval_lm_loads_checkpoint(trained_lm):
    out = _run(
        [
            "fairseq-eval-lm",
            trained_lm["data"],
            "--path",
            trained_lm["save_dir"] / "checkpoint_1_2.pt",
            "--task",
            "language_modeling",
            "--tokens-per-sample",
            35,
            "--batch-size",
            8,
            "--gen-subset",
            "valid",
            *COMMON,
        ],
        trained_lm["work"],
    )
    # the checkpoint's own perplexity on valid, computed here from the split (score_kit)
    expected = block_perplexity(
        trained_lm["save_dir"] / "checkpoint_1_2.pt", trained_lm["data"], "valid", 35
    )
    assert printed_perplexity(out) == pytest.approx(expected, rel=1e-5, abs=0.006)


@pytest.mark.slow
def test_resume_from_checkpoint_last(trained_lm):
    save_dir = trained_lm["save_dir"]
    out = _train_lm(trained_lm["data"], save_dir, 8, trained_lm["work"])
    assert re.search(r"Loaded checkpoint \S*checkpoint_last\.pt \(epoch 1 @ 4 updates\)", out), out[
        -3000:
    ]
    assert "No existing checkpoint found" not in out
    assert "num_updates: 8 >= max_update: 8" in out, out[-3000:]
    state = torch.load(save_dir / "checkpoint_last.pt")
    # the optimizer history of the first run was carried over, and the data iterator continued
    assert [h["num_updates"] for h in state["optimizer_history"]] == [4, 8]
    assert state["extra_state"]["train_iterator"]["iterations_in_epoch"] == 8
    assert (save_dir / "checkpoint_1_6.pt").is_file()


@pytest.mark.slow
def test_translation_checkpoint_with_bleu_meters_generates(multi30k_small_bin, tmp_path):
    """A stock lstm translation model trained with --eval-bleu: its meters hold numpy arrays."""
    save_dir = tmp_path / "checkpoints"
    train = ["--seed", 1, "--optimizer", "sgd", "--lr", 0.5, "--max-tokens", 1000]
    train += [
        "--max-update",
        3,
        "--save-dir",
        save_dir,
        "--eval-bleu",
        "--eval-bleu-detok",
        "space",
    ]
    train += ["--eval-bleu-args", '{"beam": 1, "max_len_b": 10}']
    argv = mt_train_argv(multi30k_small_bin, *train, task="translation", model=TINY_MT)
    _run(["fairseq-train", *argv], tmp_path)
    ckpt = save_dir / "checkpoint_last.pt"
    needed = _globals_stock_torch_refuses(ckpt)
    assert "argparse.Namespace" in needed
    assert {"numpy.ndarray", "numpy.dtype"} <= needed, needed
    state = torch.load(ckpt)
    valid = dict((m[1], m[3]) for m in state["extra_state"]["metrics"]["valid"])
    assert isinstance(valid["_bleu_counts"]["sum"], np.ndarray)

    out = _run(
        [
            "fairseq-generate",
            multi30k_small_bin,
            "--path",
            ckpt,
            "--task",
            "translation",
            "--gen-subset",
            "valid",
            "--beam",
            2,
            "--max-len-b",
            20,
            "--batch-size",
            64,
            "--scoring",
            "sacrebleu",
            *COMMON,
        ],
        tmp_path,
    )
    printed, expected = generate_bleu(out, "valid", beam=2)  # sacrebleu of what it printed
    assert printed == expected


_SUB_PACKAGE = r"""
import argparse, importlib, io, pickle, sys
import numpy as np
import torch

buf = io.BytesIO()
# what fairseq writes besides tensors: an argparse config, numpy arrays and scalars of the meters
torch.save({"args": argparse.Namespace(arch="lstm_lm"), "metrics": [np.arange(3), np.float64(0.5)]}, buf)
def load():
    buf.seek(0)
    return torch.load(buf, weights_only=True)
try:
    load()
except pickle.UnpicklingError:
    print("REFUSED")
before = len(torch.serialization.get_safe_globals())
importlib.import_module(sys.argv[1])
print("GREW", len(torch.serialization.get_safe_globals()) > before)
print("LOADED", load()["args"].arch)
print("PLUGIN", "fairseq_noising.fairseq_plugin" in sys.modules)
"""


@pytest.mark.slow  # a fresh interpreter each
@pytest.mark.parametrize("name", ["tasks", "models", "optim", "data"])
def test_a_fairseq_side_sub_package_allow_lists_fairseq_checkpoints(name):
    """Importing one fairseq-side sub-package alone, before fairseq, is enough: the safe loader
    then reads what fairseq checkpoints hold. The plugin itself is not imported on the way."""
    proc = subprocess.run(
        [sys.executable, "-c", _SUB_PACKAGE, f"fairseq_noising.{name}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=CLI_ENV,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    for line in ("REFUSED", "GREW True", "LOADED lstm_lm", "PLUGIN False"):
        assert line in proc.stdout, proc.stdout + proc.stderr[-4000:]


def test_allow_list_is_idempotent_and_narrow():
    first = allow_fairseq_checkpoints()
    assert allow_fairseq_checkpoints() == first
    registered = torch.serialization.get_safe_globals()
    for entry in first:
        assert entry in registered
    # arrays of plain numbers load; object arrays (arbitrary pickles inside) are still refused
    buf = io.BytesIO()
    torch.save({"a": np.arange(3), "s": np.float64(0.5)}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["a"].tolist() == [0, 1, 2] and loaded["s"] == 0.5
    buf = io.BytesIO()
    torch.save({"o": np.array([{"x": 1}], dtype=object)}, buf)
    buf.seek(0)
    with pytest.raises(Exception, match="ObjectDType|not an allowed global|allowlisted"):
        torch.load(buf)


@pytest.mark.skipif(torch.__version__ < "2.6", reason="aliases need torch >= 2.6 add_safe_globals")
def test_numpy_1x_module_paths_load():
    """Checkpoints written under numpy 1.x name ``numpy.core.multiarray``; numpy 2 ``numpy._core``."""
    buf = io.BytesIO()
    torch.save({"a": np.arange(3), "s": np.float64(0.5)}, buf, _use_new_zipfile_serialization=False)
    raw = buf.getvalue()
    other = (
        b"numpy.core.multiarray" if b"numpy._core.multiarray" in raw else b"numpy._core.multiarray"
    )
    rewritten = raw.replace(b"numpy._core.multiarray", other).replace(
        b"numpy.core.multiarray", other
    )
    assert other in rewritten
    loaded = torch.load(io.BytesIO(rewritten))
    assert loaded["a"].tolist() == [0, 1, 2] and loaded["s"] == 0.5
