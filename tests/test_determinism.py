"""Noise is a pure function of --seed, the epoch and the example ids.

In-process: same seed gives identical batches, another epoch or seed gives other noise, and an
example's noise does not depend on its batch or its padding. Through the real fairseq-train:
--num-workers 0 and 2 train bit-identical models over two epochs (fairseq keeps data-loader
workers across epochs, so this also shows the second epoch's noise reaches the workers), and
training one epoch then resuming from checkpoint_last.pt gives the uninterrupted run's model.
"""

import numpy as np
import pytest
import torch
from conftest import TINY_LM, build_task, checkpoint_state, lm_train_argv, mt_train_argv, run_cli

pytestmark = pytest.mark.slow  # tasks over real data and fairseq-train runs


def noised_rows(task, ids, epoch):
    wrapper = task.dataset("train")
    wrapper.set_epoch(epoch)
    batch = wrapper.collater([wrapper.dataset[i] for i in ids])
    return batch["net_input"]["src_tokens"].numpy(), batch["target"].numpy()


@pytest.fixture(scope="module")
def kn_task(ptb_small_bin):
    task, _ = build_task(lm_train_argv(ptb_small_bin, "--seed", 3, scheme="kn", gamma=0.5))
    task.load_dataset("train")
    return task


def test_same_seed_same_noise_other_epoch_or_seed_other_noise(kn_task, ptb_small_bin):
    ids = list(range(200))
    again, _ = build_task(lm_train_argv(ptb_small_bin, "--seed", 3, scheme="kn", gamma=0.5))
    again.load_dataset("train")
    first = noised_rows(kn_task, ids, epoch=2)
    for a, b in zip(first, noised_rows(again, ids, epoch=2)):
        np.testing.assert_array_equal(a, b)
    assert (noised_rows(kn_task, ids, epoch=3)[0] != first[0]).sum() > 100
    other, _ = build_task(lm_train_argv(ptb_small_bin, "--seed", 4, scheme="kn", gamma=0.5))
    other.load_dataset("train")
    assert (noised_rows(other, ids, epoch=2)[0] != first[0]).sum() > 100


def test_an_examples_noise_does_not_depend_on_its_batch(kn_task):
    together = noised_rows(kn_task, [5, 17, 40, 41], epoch=1)[0]
    for row, i in enumerate([5, 17, 40, 41]):
        alone = noised_rows(kn_task, [i], epoch=1)[0][0]
        np.testing.assert_array_equal(together[row][: alone.size], alone)


def test_translation_noise_does_not_depend_on_padding(multi30k_small_bin):
    task, _ = build_task(mt_train_argv(multi30k_small_bin, scheme="kn", gamma=0.6))
    task.load_dataset("train")
    wrapper = task.dataset("train")
    lengths = wrapper.dataset.src_sizes
    short, long = int(np.argmin(lengths)), int(np.argmax(lengths))
    pad = task.src_dict.pad()
    alone = wrapper.collater([wrapper.dataset[short]])
    mixed = wrapper.collater([wrapper.dataset[short], wrapper.dataset[long]])
    row = int((mixed["id"] == short).nonzero()[0, 0])
    for key in ("src_tokens", "prev_output_tokens"):
        a = alone["net_input"][key][0]
        b = mixed["net_input"][key][row]
        np.testing.assert_array_equal(a[a.ne(pad)].numpy(), b[b.ne(pad)].numpy())
    t = mixed["target"][row]
    np.testing.assert_array_equal(alone["target"][0].numpy(), t[t.ne(pad)].numpy())


# --- through fairseq-train ------------------------------------------------------------------


def train(data, save_dir, *extra, scheme="kn"):
    """The tiny stock LM with ``scheme`` at gamma 0.5, the paper's SGD over sentence-averaged
    batches of 20 rows from seed 11; returns the last checkpoint's model."""
    flags = ["--batch-size", 20, "--required-batch-size-multiple", 1, "--sentence-avg"]
    flags += ["--seed", 11, "--save-dir", save_dir, "--no-epoch-checkpoints"]
    options = dict(model=TINY_LM, scheme=scheme, gamma=0.5, lr=1.0)
    run_cli(["fairseq-train", *lm_train_argv(data, *flags, *extra, **options)])
    state = checkpoint_state(save_dir / "checkpoint_last.pt")
    return state["model"]


def assert_same_model(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs"


def test_workers_and_resume_train_the_same_model(ptb_tiny_bin, tmp_path):
    tiny_ptb = ptb_tiny_bin
    reference = train(tiny_ptb, tmp_path / "w0", "--num-workers", "0", "--max-epoch", "2")
    with_workers = train(tiny_ptb, tmp_path / "w2", "--num-workers", "2", "--max-epoch", "2")
    assert_same_model(reference, with_workers)

    train(tiny_ptb, tmp_path / "resumed", "--num-workers", "0", "--max-epoch", "1")
    resumed = train(tiny_ptb, tmp_path / "resumed", "--num-workers", "0", "--max-epoch", "2")
    assert_same_model(reference, resumed)

    # and the noise matters: without it the same run trains another model
    clean = train(
        tiny_ptb, tmp_path / "clean", "--num-workers", "0", "--max-epoch", "2", scheme="none"
    )
    assert any(not torch.equal(reference[k], clean[k]) for k in reference)
