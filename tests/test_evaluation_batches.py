"""Evaluation scores every example: fairseq's ``batch_by_size`` drops a last batch whose size is
not a multiple of ``--required-batch-size-multiple`` (default 8), the longest sentences; the
plugin's tasks batch every split but the training one with a multiple of 1 and say so.

Oracle: fairseq's own ``FairseqTask.get_batch_iterator`` on the same dataset and flags, which
leaves examples out, and the count of the split's examples.
"""

import logging

import pytest
from conftest import TINY_LM, TINY_MT, build_task, lm_train_argv, mt_train_argv
from fairseq.tasks import FairseqTask

pytestmark = pytest.mark.slow  # binarized real data


def batched(task, dataset, max_tokens, get=None, **flags):
    """The examples of ``dataset`` in the batches of ``get`` (the task's own by default) at
    ``--max-tokens max_tokens`` and fairseq's default multiple of 8 (no iterator cache)."""
    get = get or task.get_batch_iterator
    flags.update(max_tokens=max_tokens, required_batch_size_multiple=8)
    iterator = get(dataset=dataset, disable_iterator_cache=True, **flags)
    return sorted(int(i) for batch in iterator.frozen_batches for i in batch)


def fairseqs(task):
    return lambda **kw: FairseqTask.get_batch_iterator(task, **kw)


@pytest.mark.parametrize("kind", ["lm", "mt"])
def test_every_evaluation_example_is_batched_and_the_change_is_said(
    kind, ptb_tiny_bin, multi30k_small_bin, caplog
):
    if kind == "lm":
        argv = lm_train_argv(ptb_tiny_bin, "--batch-size", 20, model=TINY_LM)
    else:
        argv = mt_train_argv(multi30k_small_bin, "--batch-size", 20, model=TINY_MT)
    task, _ = build_task(argv)
    task.load_dataset("valid")
    valid = task.dataset("valid")
    # a batch size at which fairseq's own batching leaves the longest examples out
    tokens = next(
        t for t in range(200, 800, 7) if len(batched(task, valid, t, fairseqs(task))) < len(valid)
    )
    with caplog.at_level(logging.INFO):
        ours = batched(task, valid, tokens)
    assert ours == list(range(len(valid)))
    assert (
        f"batching {len(valid)} evaluation examples with --required-batch-size-multiple 1 "
        "instead of 8" in caplog.text
    )
    # the training split is batched as fairseq batches it
    task.load_dataset("train")
    train = task.dataset("train")
    assert batched(task, train, tokens, epoch=1) == batched(
        task, train, tokens, fairseqs(task), epoch=1
    )
