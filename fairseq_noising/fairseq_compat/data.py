"""fairseq's datasets and batch iterators: a binarized split's tokens read at once, an epoch
iterator whose every item is one batch, evaluation batches that drop no example, and epoch
workers that end with their epoch.
"""

import logging
from typing import Optional

import numpy as np
from fairseq.data import iterators

logger = logging.getLogger(__name__)


def indexed_tokens(dataset) -> Optional[np.ndarray]:
    """All tokens of an ``mmap`` indexed dataset straight from its buffer, or None.

    Depends on ``MMapIndexedDataset`` keeping the memory-mapped ``.bin`` in ``_bin_buffer`` and
    the byte offset of item 0 in ``_index._pointers[0]``, with items stored back to back in
    ``_index.dtype``. Any other dataset returns None and is read item by item by the caller.
    """
    index = getattr(dataset, "_index", None)
    buffer = getattr(dataset, "_bin_buffer", None)
    if index is None or buffer is None:
        return None
    count = int(np.asarray(dataset.sizes, dtype=np.int64).sum())
    start = int(index._pointers[0]) if count else 0
    return np.frombuffer(buffer, dtype=index.dtype, count=count, offset=start).astype(np.int64)


def ordered_batch_iterator(dataset, seed=1, num_workers=0, epoch=1, buffer_size=0):
    """An epoch iterator over a dataset whose every item is already one whole batch, in order.

    fairseq's ``get_batch_iterator`` batches by size and caches by dataset; stateful BPTT needs
    item i to be batch i, so ``EpochBatchIterator`` is built directly with one-item batches and
    shuffling disabled (its constructor is public but not documented as a task hook).
    """
    return iterators.EpochBatchIterator(
        dataset=dataset,
        collate_fn=dataset.collater,
        batch_sampler=[[i] for i in range(len(dataset))],
        seed=seed,
        num_workers=num_workers,
        epoch=epoch,
        buffer_size=buffer_size,
        disable_shuffling=True,
    )


def every_example(task, dataset, kwargs: dict) -> dict:
    """``get_batch_iterator``'s keyword arguments, such that an evaluation split loses no example.

    Depends on ``fairseq.data.data_utils.batch_by_size``, which drops a last batch whose size is
    not a multiple of ``--required-batch-size-multiple`` (default 8), and on the indices being
    sorted by length before it batches them: fairseq-generate, fairseq-validate and the
    validation inside fairseq-train leave out the longest sentences without a word. For any
    dataset but the training subset's the multiple becomes 1, said once in one line; the
    training split is batched as fairseq batches it.
    """
    multiple = kwargs.get("required_batch_size_multiple", 1) or 1
    cfg = getattr(task, "args", None) or task.cfg  # fairseq's language_modeling keeps ``args``
    train = task.datasets.get(getattr(cfg, "train_subset", "train"))
    if multiple == 1 or dataset is train:
        return kwargs
    if id(dataset) not in _TOLD:
        _TOLD.add(id(dataset))
        logger.info(
            f"batching {len(dataset)} evaluation examples with --required-batch-size-multiple 1 "
            f"instead of {multiple}: fairseq would drop a last batch of another size, the longest "
            "examples"
        )
    return {**kwargs, "required_batch_size_multiple": 1}


_TOLD: set = set()


def workers_end_with_their_epoch(iterator, dataset):
    """``iterator`` (an ``EpochBatchIterator``) without persistent workers where ``dataset``
    cannot reuse its epoch iterator (a noised or resampled training set: a new iterator each
    epoch).

    Depends on ``EpochBatchIterator.persistent_workers``, read when the epoch's ``DataLoader`` is
    made (fairseq sets it from ``num_workers > 0``). Persistent workers outlive the epoch inside
    the old loader, which is never used again; a process forked while it lives (the next
    epoch's workers) holds a copy of it, and when that copy goes, torch's
    ``_MultiProcessingDataLoaderIter.__del__`` tests workers that are not its children
    ("AssertionError: can only test a child process"). Workers that end with their epoch leave
    a loader that is shut down, whose copies go quietly.
    """
    if not getattr(dataset, "can_reuse_epoch_itr_across_epochs", True):
        iterator.persistent_workers = False
    return iterator
