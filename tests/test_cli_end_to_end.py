"""Every noising scheme end to end through the real console scripts.

For each scheme: ``fairseq-train`` with ``--task noised_language_modeling`` on the small PTB slice
and with ``--task noised_translation`` on the small Multi30k slice, side by side, one process a
core. Each checkpoint is then loaded back as fairseq's evaluation commands load it
(``load_model_ensemble_and_task``, the task rebuilt from the checkpoint's own config): the valid
batches its task serves are those of the unnoised task, every tensor equal. For ``none`` and
``kn`` the evaluation commands run as well (evaluation does not depend on the scheme, only on
the checkpoint's task): ``fairseq-eval-lm`` prints the checkpoint's perplexity on valid, as
computed here from the split (tests/score_kit.py), and ``fairseq-generate`` a hypothesis for every
sentence and the BLEU that sacrebleu gives its printed hypotheses and references. Models are stock
fairseq LSTMs of width 16 trained for 4 updates: this checks plumbing (flags, statistics cache,
checkpoints that load back, the evaluation of the plugin's tasks), not quality.
"""

import functools
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import CLI_ENV, COMMON, TINY_LM, TINY_MT, lm_train_argv, mt_train_argv, run_cli
from score_kit import block_perplexity, generate_bleu, load_checkpoint, printed_perplexity

from fairseq_noising.schemes import SCHEMES  # every registered scheme
from fairseq_noising.stats_cache import cache_path

# slow: fairseq-train, fairseq-eval-lm and fairseq-generate on real data; one pytest-xdist
# worker: every scheme's checkpoints (module fixtures) are trained once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cli_end_to_end")]


# what the commands of this file add to conftest's COMMON: batches of 20 rows; to train, 4 Adam
# updates from seed 1
BATCHES = ["--batch-size", 20, "--required-batch-size-multiple", 1]
TRAIN = [*BATCHES, "--max-update", 4, "--optimizer", "adam", "--lr", 0.001, "--seed", 1]
TRAIN += ["--no-epoch-checkpoints"]

# the schemes whose checkpoints fairseq-eval-lm and fairseq-generate score; every scheme's
# checkpoint is loaded back and its valid batches checked in-process (valid_batches)
EVALUATED = ("none", "kn")

# the statistics caches of the training splits (train.noise_stats.npz, ...)
LM_CACHES = [os.path.basename(cache_path("train"))]
MT_CACHES = [os.path.basename(cache_path(f"train.en-de.{lang}")) for lang in ("en", "de")]


def private_copy(src, dst):
    """A copy of a binarized data folder without any statistics cache, for one test alone."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*noise?stats*"))
    return dst


def check_trained(proc, scheme, save_dir, data, caches):
    log = proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert re.search(r"num_updates 4\b", log), f"no 4th update in the log:\n{log[-3000:]}"
    assert "done training" in log
    assert (save_dir / "checkpoint_last.pt").is_file()
    noising_lines = re.findall(r"noising \S+ with (\w+), gamma_0=([0-9.]+)", log)
    if scheme == "none":
        assert noising_lines == []
        for name in caches:
            assert not (data / name).exists(), f"scheme none built statistics {name}"
        return
    assert noising_lines, f"no 'noising ... with {scheme}' line in the log:\n{log[-3000:]}"
    assert {s for s, _ in noising_lines} == {scheme}
    assert {float(g) for _, g in noising_lines} == {0.2}
    assert len(noising_lines) == len(caches)  # one noiser per noised side
    for name in caches:
        path = data / name
        assert path.is_file(), f"statistics cache {name} missing after training with {scheme}"
        with np.load(path, allow_pickle=False) as arrays:
            assert "key" in arrays.files and "unigram" in arrays.files
            assert arrays["unigram"].sum() > 0


@functools.cache
def valid_batches(checkpoint, data):
    """The valid batches of the checkpoint's task as fairseq's evaluation commands make them: the
    task loaded as fairseq-eval-lm and fairseq-generate load it (``load_checkpoint``), valid
    batched in order, 20 rows a batch, at epoch 1. Cached: the unnoised run's batches are every
    scheme's reference."""
    _, task = load_checkpoint(checkpoint, data)
    task.load_dataset("valid")
    batches = task.get_batch_iterator(task.dataset("valid"), max_sentences=20, epoch=1)
    return list(batches.next_epoch_itr(shuffle=False))


def assert_same(a, b, where="batch"):
    """Equal nested batches: the same keys, every tensor equal."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), f"{where} differs"
    else:
        assert a == b, where


def check_valid_unnoised(runs, scheme):
    """The scheme's checkpoint loads back, and its task serves valid as the unnoised task does."""
    *_, data, save_dir = runs[scheme].result()
    *_, none_data, none_dir = runs["none"].result()
    batches = valid_batches(save_dir / "checkpoint_last.pt", data)
    unnoised = valid_batches(none_dir / "checkpoint_last.pt", none_data)
    assert len(batches) == len(unnoised) > 1
    for i, (batch, reference) in enumerate(zip(batches, unnoised)):
        assert_same(batch, reference, f"valid batch {i}")


def side_by_side(pipeline, folder):
    """pipeline(scheme, folder / scheme) for every scheme, one a core at a time: scheme -> future
    (its result, or the AssertionError of a command that failed, comes back on .result())."""
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
    futures = {scheme: pool.submit(pipeline, scheme, folder / scheme) for scheme in SCHEMES}
    pool.shutdown(wait=False)
    return futures


def train_and_eval_lm(scheme, folder, ptb_small_bin):
    data = private_copy(ptb_small_bin, folder / "data")
    save_dir = folder / "ckpt"
    argv = lm_train_argv(
        data, "--save-dir", save_dir, *TRAIN, model=TINY_LM, scheme=scheme, gamma=0.2
    )
    train = run_cli(["fairseq-train", *argv], env=CLI_ENV, timeout=600)
    if scheme not in EVALUATED:
        return train, None, data, save_dir
    evaluation = run_cli(
        [
            "fairseq-eval-lm",
            data,
            "--path",
            save_dir / "checkpoint_last.pt",
            "--task",
            "noised_language_modeling",
            "--gen-subset",
            "valid",
            "--tokens-per-sample",
            "35",
            *COMMON,
            *BATCHES,
        ],
        env=CLI_ENV,
        timeout=600,
    )
    return train, evaluation, data, save_dir


@pytest.fixture(scope="module")
def lm_runs(ptb_small_bin, tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm")
    return side_by_side(lambda s, f: train_and_eval_lm(s, f, ptb_small_bin), folder)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_language_model_trains_and_its_checkpoint_evaluates(scheme, lm_runs):
    train, evaluation, data, save_dir = lm_runs[scheme].result()
    check_trained(train, scheme, save_dir, data, LM_CACHES)
    check_valid_unnoised(lm_runs, scheme)
    if evaluation is None:
        return
    out = evaluation.stdout + evaluation.stderr
    assert "Traceback" not in evaluation.stderr
    # valid (unnoised) in blocks of 35 tokens, each from a zero state, every token once
    expected = block_perplexity(save_dir / "checkpoint_last.pt", data, "valid", 35)
    assert printed_perplexity(out) == pytest.approx(expected, rel=1e-5, abs=0.006)


def train_and_generate(scheme, folder, multi30k_small_bin):
    data = private_copy(multi30k_small_bin, folder / "data")
    save_dir = folder / "ckpt"
    argv = mt_train_argv(
        data, "--save-dir", save_dir, *TRAIN, model=TINY_MT, scheme=scheme, gamma=0.2
    )
    train = run_cli(["fairseq-train", *argv], env=CLI_ENV, timeout=600)
    if scheme not in EVALUATED:
        return train, None, data, save_dir
    gen = run_cli(
        [
            "fairseq-generate",
            data,
            "--path",
            save_dir / "checkpoint_last.pt",
            "--task",
            "noised_translation",
            "--scoring",
            "sacrebleu",
            "--beam",
            "2",
            "--max-len-b",
            "20",
            "--gen-subset",
            "valid",
            *COMMON,
            *BATCHES,
        ],
        env=CLI_ENV,
        timeout=600,
    )
    return train, gen, data, save_dir


@pytest.fixture(scope="module")
def translation_runs(multi30k_small_bin, tmp_path_factory):
    folder = tmp_path_factory.mktemp("translation")
    return side_by_side(lambda s, f: train_and_generate(s, f, multi30k_small_bin), folder)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_translation_model_trains_and_its_checkpoint_generates(scheme, translation_runs):
    train, gen, data, save_dir = translation_runs[scheme].result()
    check_trained(train, scheme, save_dir, data, MT_CACHES)
    check_valid_unnoised(translation_runs, scheme)
    if gen is None:
        return
    out = gen.stdout + gen.stderr
    assert "Traceback" not in gen.stderr
    # every one of the 200 validation sentences got a hypothesis
    assert len(re.findall(r"^H-\d+\t", gen.stdout, flags=re.M)) == 200
    printed, expected = generate_bleu(out, "valid", beam=2)  # sacrebleu of what it printed
    assert printed == expected
