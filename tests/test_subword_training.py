"""Subword sampling through the tasks and fairseq-train, on Multi30k and PTB slices.

Oracles: the raw text each example was made from (every resampled example spells it), the
binarized examples (the clean segmentation), the plugin's own noising of the resampled batch
collated by fairseq (sampling then noising in one pass is exactly the two one after the other),
and, through the real fairseq-train, the model trained with --num-workers 0 (the same with 2
workers and after a resume, as tests/test_determinism.py shows for the noising).
"""

import os
import shutil

import numpy as np
import pytest
import sentencepiece as spm
import torch
from conftest import (
    TINY_LM,
    TINY_MT,
    build_task,
    checkpoint_state,
    lm_train_argv,
    mt_train_argv,
    run_cli,
)
from fairseq.data import data_utils

# slow: real data, fairseq-train runs; one pytest-xdist worker: the module's fixtures are built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("subword_training")]

SAMPLING = ["--subword-sampling-alpha", "0.2"]


def text_of(sp, dictionary, tokens):
    """The text of a row of dictionary ids (padding, </s> and <blank> left out)."""
    special = {dictionary.pad(), dictionary.eos(), dictionary.index("<blank>")}
    return sp.decode([dictionary[int(t)] for t in tokens if int(t) not in special])


def train_split(task):
    task.load_dataset("train")
    return task.dataset("train")


def test_translation_examples_spell_their_text_in_a_new_segmentation(multi30k_spm_bin):
    data = multi30k_spm_bin
    raw = data.parent / "words" / "raw"
    lines = {lang: (raw / f"train.{lang}").read_text().splitlines() for lang in ("en", "de")}
    sp = {
        lang: spm.SentencePieceProcessor(model_file=str(data / f"spm.{lang}.model"))
        for lang in lines
    }
    task, _ = build_task(mt_train_argv(data, *SAMPLING, "--subword-sampling-nbest", 16))
    wrapper = train_split(task)
    wrapper.set_epoch(3)
    ids = list(range(0, 400, 3))
    batch = wrapper.collater([wrapper.dataset[i] for i in ids])
    clean = wrapper.dataset.collater([wrapper.dataset[i] for i in ids])
    changed = 0
    for row, i in enumerate(batch["id"].tolist()):
        for key, lang, d in (("src_tokens", "en", task.src_dict), ("target", "de", task.tgt_dict)):
            tokens = batch["net_input"][key][row] if key == "src_tokens" else batch[key][row]
            assert text_of(sp[lang], d, tokens) == lines[lang][i]
        before = clean["target"][row][clean["target"][row] != task.tgt_dict.pad()]
        after = batch["target"][row][batch["target"][row] != task.tgt_dict.pad()]
        changed += not torch.equal(before, after)
    assert changed > len(ids) // 4


def test_sampling_then_noising_in_one_pass_is_the_two_one_after_the_other(multi30k_spm_bin):
    both, _ = build_task(mt_train_argv(multi30k_spm_bin, *SAMPLING, scheme="kn", gamma=0.3))
    wrapper = train_split(both)
    wrapper.set_epoch(2)
    samples = [wrapper.dataset[i] for i in range(0, 120, 2)]
    one_pass = wrapper.collater(samples)
    sampled_only, _ = build_task(mt_train_argv(multi30k_spm_bin, *SAMPLING))
    resampled = train_split(sampled_only)
    resampled.set_epoch(2)
    two_steps, details = wrapper.noise_batch(resampled.collater(samples), epoch=2)
    for key in ("src_tokens", "prev_output_tokens"):
        assert torch.equal(one_pass["net_input"][key], two_steps["net_input"][key])
    assert torch.equal(one_pass["target"], two_steps["target"])
    assert details["target"].fired.any() and details["source"].fired.any()


def padded(batches, src, tgt):
    """The cells of the batches padded to their longest source and target."""
    return sum(len(b) * (src[b].max() + tgt[b].max()) for b in batches)


def test_each_epochs_batches_are_formed_from_its_sampled_lengths(multi30k_spm_bin):
    """fairseq forms an epoch's batches after setting the epoch: from the lengths the examples
    have in that epoch. Oracle: each example collated alone by the wrapper in that epoch. The
    batches hold consecutive examples in order of sampled source, then target length, pad fewer
    cells than batches formed from the binarized lengths would, and keep --max-tokens (a sentence
    that sampling made longer than it: alone in a batch)."""
    argv = mt_train_argv(multi30k_spm_bin, *SAMPLING, "--subword-sampling-nbest", 16)
    task, _ = build_task(argv)
    wrapper, pad = train_split(task), task.tgt_dict.pad()
    n, lengths = len(wrapper), {}
    for epoch in (1, 2):
        batches = task.get_batch_iterator(wrapper, max_sentences=16, seed=1, epoch=epoch)
        alone = [wrapper.collater([wrapper.dataset[i]]) for i in range(n)]  # at wrapper.epoch
        src = np.array([int(b["net_input"]["src_lengths"][0]) for b in alone])
        tgt = np.array([int((b["target"] != pad).sum()) for b in alone])
        lengths[epoch] = src, tgt
        order = np.concatenate(batches.frozen_batches)
        assert sorted(order.tolist()) == list(range(n))
        key = src[order] * 1000 + tgt[order]
        assert (np.diff(key) >= 0).all()  # by source length, then target length

        with data_utils.numpy_seed(1 + epoch):  # as fairseq orders the binarized lengths
            binarized = wrapper.dataset.ordered_indices()
        by_binarized = [binarized[i : i + 16] for i in range(0, n, 16)]
        assert padded(batches.frozen_batches, src, tgt) < padded(by_binarized, src, tgt)
        # --max-tokens holds of the sampled lengths: a batch's size times its longest side; a
        # budget of the longest binarized sentence, which sampling exceeds: alone in its batch
        longest = np.maximum(src, tgt)
        binarized = int(wrapper.dataset.num_tokens_vec(np.arange(n)).max())
        assert longest.max() > binarized
        for budget in (300, binarized):
            by_tokens = task.get_batch_iterator(wrapper, max_tokens=budget, seed=1, epoch=epoch)
            cells = [len(b) * longest[b].max() for b in by_tokens.frozen_batches]
            assert sorted(np.concatenate(by_tokens.frozen_batches).tolist()) == list(range(n))
            over = [b for b, c in zip(by_tokens.frozen_batches, cells) if c > budget]
            assert all(len(b) == 1 for b in over) and (budget == 300 or over)
    assert (lengths[1][0] != lengths[2][0]).any() and (lengths[1][1] != lengths[2][1]).any()


def spm_lm_data(tmp_path, ptb_tiny_bin):
    """PTB's tiny slice on a 300-piece unigram model of its own, binarized with the model's
    pieces as the dictionary, the model beside the data as spm.model."""
    from conftest import fairseq_preprocess

    from fairseq_noising.data_prep.subwords import train_model
    from fairseq_noising.subword import SubwordModel

    raw = ptb_tiny_bin.parent / "raw"
    model = train_model([str(raw / "ptb.train.txt")], str(tmp_path / "spm"), 300)
    SubwordModel(model).write_dictionary(str(tmp_path / "dict.txt"))
    sp = spm.SentencePieceProcessor(model_file=model)
    for split in ("train", "valid", "test"):
        text = (raw / f"ptb.{split}.txt").read_text().splitlines()
        pieces = [" ".join(sp.encode(line.strip(), out_type=str)) for line in text]
        (tmp_path / f"{split}.txt").write_text("\n".join(pieces) + "\n")
    flags = ["--only-source", "--srcdict", tmp_path / "dict.txt", "--destdir", tmp_path / "bin"]
    for split in ("train", "valid", "test"):
        flags += [f"--{split}pref", tmp_path / f"{split}.txt"]
    data = fairseq_preprocess(*flags)
    shutil.copy(model, data / "spm.model")
    return data, sp


def test_language_model_blocks_are_resampled_and_their_source_follows(tmp_path, ptb_tiny_bin):
    """Blocks of --tokens-per-sample pieces, cut anywhere, words too. (--sample-break-mode eos
    fails inside fairseq's TokenBlockDataset under numpy 2, which has no np.compat.)"""
    data, sp = spm_lm_data(tmp_path, ptb_tiny_bin)
    flags = [*SAMPLING, "--noise-scheme", "kn", "--noise-gamma", 0]
    task, _ = build_task(lm_train_argv(data, *flags))
    wrapper = train_split(task)
    wrapper.set_epoch(4)
    d = task.dictionary
    changed = 0
    for i in range(0, len(wrapper), 7):
        clean = wrapper.dataset[i]
        batch = wrapper.collater([clean])
        source, target = batch["net_input"]["src_tokens"][0], batch["target"][0]
        assert text_of(sp, d, target).strip() == text_of(sp, d, clean["target"]).strip()
        assert source[0] == clean["source"][0] and torch.equal(source[1:], target[:-1])
        changed += not torch.equal(target, clean["target"])
    assert changed > len(range(0, len(wrapper), 7)) // 4


def test_a_language_models_batches_are_formed_from_its_sampled_block_lengths(
    tmp_path, ptb_tiny_bin
):
    """Blocks of one binarized length sort by their sampled lengths (oracle: each block collated
    alone by the wrapper in that epoch)."""
    data, _ = spm_lm_data(tmp_path, ptb_tiny_bin)
    task, _ = build_task(lm_train_argv(data, *SAMPLING))
    wrapper, pad = train_split(task), task.dictionary.pad()
    n, lengths = len(wrapper), {}
    assert len(set(wrapper.dataset.sizes[:-1].tolist())) == 1  # blocks of one length, but the last
    for epoch in (1, 2):
        batches = task.get_batch_iterator(wrapper, max_sentences=8, seed=1, epoch=epoch)
        alone = [wrapper.collater([wrapper.dataset[i]]) for i in range(n)]  # at wrapper.epoch
        lengths[epoch] = np.array([int((b["target"] != pad).sum()) for b in alone])
        order = np.concatenate(batches.frozen_batches)
        assert sorted(order.tolist()) == list(range(n))
        assert (np.diff(lengths[epoch][order]) >= 0).all()
        assert len(set(lengths[epoch].tolist())) > 3
    assert (lengths[1] != lengths[2]).any()


# --- through fairseq-train ------------------------------------------------------------------


def train(data, save_dir, *extra):
    """The tiny LSTM translation model with subword sampling and kn noising on both sides, SGD
    from seed 5; returns the last checkpoint's model."""
    flags = ["--batch-size", 32, "--required-batch-size-multiple", 1, "--sentence-avg"]
    flags += ["--seed", 5, "--save-dir", save_dir, "--no-epoch-checkpoints", *extra]
    argv = mt_train_argv(data, *flags, model=TINY_MT, scheme="kn", gamma=0.2, lr=1.0)
    run_cli(["fairseq-train", *argv])
    return checkpoint_state(save_dir / "checkpoint_last.pt")["model"]


def same_model(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def unsampled(multi30k_spm_bin, tmp_path_factory):
    """The run of the test below without sampling (one for both of its nbest settings)."""
    folder = tmp_path_factory.mktemp("plain")
    return train(multi30k_spm_bin, folder, "--num-workers", 0, "--max-epoch", 2)


# each of sentencepiece's two ways of sampling (the whole lattice, -1, and among the 8 best) is
# trained again once: in data-loading workers, or stopped after epoch 1 and resumed
@pytest.mark.parametrize("nbest,again", [(-1, "workers"), (8, "resumed")])
def test_workers_and_resume_train_the_same_model_with_sampling(
    multi30k_spm_bin, unsampled, tmp_path, nbest, again
):
    data, sampling = multi30k_spm_bin, [*SAMPLING, "--subword-sampling-nbest", nbest]
    reference = train(data, tmp_path / "w0", *sampling, "--num-workers", 0, "--max-epoch", 2)
    if again == "workers":
        other = train(data, tmp_path / "w2", *sampling, "--num-workers", 2, "--max-epoch", 2)
    else:
        train(data, tmp_path / "resumed", *sampling, "--num-workers", 0, "--max-epoch", 1)
        other = train(data, tmp_path / "resumed", *sampling, "--num-workers", 0, "--max-epoch", 2)
    assert same_model(reference, other)
    # and the sampling matters: without it the same run trains another model
    assert not same_model(reference, unsampled)


def test_a_language_model_trains_with_sampling(tmp_path, ptb_tiny_bin):
    data, _ = spm_lm_data(tmp_path, ptb_tiny_bin)
    flags = [*SAMPLING, "--max-update", 3, "--batch-size", 8, "--save-dir", tmp_path / "ckpt"]
    proc = run_cli(["fairseq-train", *lm_train_argv(data, *flags, model=TINY_LM, lr=1.0)])
    assert "subword sampling with" in proc.stdout + proc.stderr
    state = checkpoint_state(tmp_path / "ckpt" / "checkpoint_last.pt")
    assert state["optimizer_history"][-1]["num_updates"] == 3


def test_an_ended_epochs_loader_leaves_no_worker_behind(multi30k_spm_bin):
    """A wrapped training set gets a new epoch iterator every epoch (it cannot be reused). Read
    as fairseq-train reads it (a buffer of 10 batches filled by a thread), its data-loader
    workers end with their epoch: none is alive once the epoch is read, and a process forked
    after it (the next epoch's workers are) that drops its copy of the ended epoch's loader does
    so quietly. Persistent workers stayed alive inside the old loader, whose copy, dropped in a
    forked process, raised "AssertionError: can only test a child process" from
    ``_MultiProcessingDataLoaderIter.__del__``."""
    import gc
    import multiprocessing
    import time

    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    argv = mt_train_argv(multi30k_spm_bin, *SAMPLING, "--batch-size", 64, model=TINY_MT)
    task, _ = build_task(argv)
    task.load_dataset("train")
    batches = task.get_batch_iterator(
        dataset=task.dataset("train"),
        max_sentences=64,
        num_workers=1,
        epoch=1,
        data_buffer_size=10,
    )
    for _ in batches.next_epoch_itr(shuffle=True):
        pass
    deadline = time.monotonic() + 30  # the buffer's thread reads the loader to its end
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert multiprocessing.active_children() == []
    loaders = [o for o in gc.get_objects() if isinstance(o, _MultiProcessingDataLoaderIter)]

    def drop_copy():  # of every loader still in memory (the ended epoch's is gone already)
        try:
            for loader in loaders:
                loader.__del__()  # what the garbage collector runs when a copy goes
        except AssertionError:
            os._exit(1)
        os._exit(0)

    child = multiprocessing.get_context("fork").Process(target=drop_copy)
    child.start()
    child.join(60)
    assert child.exitcode == 0
