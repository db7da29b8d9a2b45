"""Every place where the plugin relies on a fairseq detail that is not public API.

Each helper names the fairseq behaviour it depends on; if a fairseq release changes one, this is
the file to fix. (Loading fairseq checkpoints under torch >= 2.6 is :mod:`.checkpoint_safety`.)
"""

import atexit
import logging
from typing import Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
from fairseq import checkpoint_utils
from fairseq.data import iterators

_MISSING = object()
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


def best_validation_value(default=_MISSING):
    """fairseq's running best validation value, which also decides ``checkpoint_best.pt``.

    Depends on ``checkpoint_utils.save_checkpoint`` keeping it in the function attribute
    ``save_checkpoint.best`` (set after every validation that saves, restored from a checkpoint's
    ``extra_state["best"]`` on resume). Returns ``default`` when no validation has set it yet.
    """
    return getattr(checkpoint_utils.save_checkpoint, "best", default)


def sync_fp16_model(optimizer) -> None:
    """After writing the fp32 master parameters of ``--fp16`` training, copy them to the model.

    Depends on ``FP16Optimizer`` (``fp32_params``, ``_sync_fp32_params_to_fp16``), which has no
    public way to push master weights into the fp16 model outside an optimizer step. Other
    optimizers update the model's parameters directly and need nothing.
    """
    if hasattr(optimizer, "fp32_params") and hasattr(optimizer, "_sync_fp32_params_to_fp16"):
        optimizer._sync_fp32_params_to_fp16()


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


def final_state(net_output) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """The LSTM's (h, c) after the batch, detached, from a decoder's ``(x, extra)`` output.

    fairseq decoders return ``(features, extra)`` with ``extra`` a dict; the plugin's LSTM
    decoders put their final state in ``extra["final_state"]``. Returns None for other outputs.
    """
    extra = net_output[1] if isinstance(net_output, tuple) and len(net_output) > 1 else None
    if not isinstance(extra, dict) or extra.get("final_state") is None:
        return None
    return tuple(s.detach() for s in extra["final_state"])


def takes_initial_state(model) -> bool:
    """Whether a model's decoder carries a state across batches (stateful BPTT).

    Reads the public class attribute ``supports_initial_state`` of the plugin's decoders.
    """
    return bool(getattr(getattr(model, "decoder", None), "supports_initial_state", False))


def leave_gloo_group_at_exit() -> None:
    """Destroy a gloo process group from an ``atexit`` handler, before Python shuts down.

    fairseq's ``distributed_main`` ends with a barrier and never calls
    ``torch.distributed.destroy_process_group``. The gloo group is then torn down during
    interpreter finalization, which now and then aborts a rank (SIGABRT, exit code 134) after
    training finished: seen once in this project's two-rank CPU test; torch tracks the crash in
    pytorch/pytorch#190489. The handler does the same teardown while the interpreter is whole.
    Other backends are left to fairseq and torch as they are.
    """
    atexit.register(_destroy_gloo_group)


def _destroy_gloo_group() -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
        dist.destroy_process_group()
        logger.info("left the gloo process group before interpreter shutdown")
