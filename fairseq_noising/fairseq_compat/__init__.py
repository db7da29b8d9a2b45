"""Every place where the plugin relies on a fairseq detail that is not public API.

Each helper names the fairseq behaviour it depends on; if a fairseq release changes one, this is
the package to fix (a sweep row's record while fairseq-train runs: :mod:`.training`; batches of
lengths other than the binarized: :mod:`.batching`; checkpoints under torch >= 2.6:
:mod:`fairseq_noising.checkpoint_safety`).
"""

import atexit
import functools
import logging
import os
import sys
from collections import defaultdict
from contextlib import nullcontext
from typing import Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
from fairseq import checkpoint_utils
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


def forget_best_validation_value() -> None:
    """Starts fairseq's running bests afresh, for a new training in this process.

    Depends on two function attributes that live as long as the process: ``save_checkpoint.best``
    in ``checkpoint_utils`` (the best validation value, which decides ``checkpoint_best.pt``) and
    ``should_stop_early.best`` / ``.num_runs`` in ``fairseq_cli.train`` (``--patience``: the
    validations since the best). A second training in one process (rows of a Hydra sweep under
    the basic launcher, or in a reused joblib worker) would compare its validations with the
    first one's: it might write no ``checkpoint_best.pt``, and stop early ("valid performance
    hasn't improved") while it improves. Called where such a training starts (a sweep's row),
    before fairseq-train restores a resumed training's own best from its checkpoint; not by the
    tasks, which fairseq-eval-lm and fairseq-generate set up too.
    """
    train = sys.modules.get("fairseq_cli.train")  # not imported: no training has used it
    for keeper in (checkpoint_utils.save_checkpoint, getattr(train, "should_stop_early", None)):
        for name in ("best", "num_runs"):
            if hasattr(keeper, name):
                delattr(keeper, name)


def sync_fp16_model(optimizer) -> None:
    """After writing the fp32 master parameters of ``--fp16`` training, copy them to the model.

    Depends on ``FP16Optimizer`` (``fp32_params``, ``_sync_fp32_params_to_fp16``), which has no
    public way to push master weights into the fp16 model outside an optimizer step. Other
    optimizers update the model's parameters directly and need nothing.
    """
    if hasattr(optimizer, "fp32_params") and hasattr(optimizer, "_sync_fp32_params_to_fp16"):
        optimizer._sync_fp32_params_to_fp16()


def checkpoint_files(checkpoint, distributed_training) -> Tuple[str, str]:
    """(the file fairseq-train resumes from, its checkpoint_best.pt) for the ``checkpoint`` and
    ``distributed_training`` configs; ValueError naming the flag for sharded checkpoints.

    :func:`end_load_checkpoint_with`'s hook is handed the trainer, not the file: the rule is
    copied from ``checkpoint_utils.load_checkpoint`` (inline there) and
    ``Trainer.checkpoint_suffix``."""
    if (
        distributed_training.ddp_backend == "fully_sharded"
        and distributed_training.use_sharded_state
    ):
        raise ValueError(
            "--use-sharded-state writes one checkpoint per rank (checkpoint_last-shard<rank>.pt); "
            "expected one whole checkpoint: drop --use-sharded-state"
        )
    suffix = checkpoint.checkpoint_suffix or ""
    best = os.path.join(checkpoint.save_dir, f"checkpoint_best{suffix}.pt")
    if checkpoint.restore_file != "checkpoint_last.pt":
        return checkpoint.restore_file.replace(".pt", suffix + ".pt"), best
    last = os.path.join(checkpoint.save_dir, f"checkpoint_last{suffix}.pt")
    if not os.path.exists(last) and checkpoint.continue_once is not None:
        last = checkpoint.continue_once
    return last, best


def checkpoint_position(state) -> dict:
    """Where in training a loaded fairseq checkpoint was saved, and after which validation.

    Returns ``{"updates", "loss", "epoch", "inside", "where"}``: the number of updates, the
    ``--best-checkpoint-metric`` value of the validation that preceded the save (None: none), the
    epoch, whether the save was inside it, and those in words. Depends on ``Trainer.state_dict``
    and ``checkpoint_utils.save_checkpoint``: the updates in
    ``optimizer_history[-1]["num_updates"]``, the value in ``extra_state["val_loss"]``, and the
    epoch iterator's state in ``extra_state["train_iterator"]`` (at the end of epoch e it already
    names epoch e + 1, with 0 iterations done).
    """
    history = state.get("optimizer_history") or [{}]
    extra = state.get("extra_state") or {}
    itr = extra.get("train_iterator") or {}
    epoch, inside = itr.get("epoch"), bool(itr.get("iterations_in_epoch", 0))
    updates = history[-1].get("num_updates")
    if epoch is None:
        where = "an unknown point"
    elif inside:
        where = f"update {updates} inside epoch {epoch}"
    else:
        epoch -= 1
        where = f"the end of epoch {epoch}"
    loss = extra.get("val_loss")
    return dict(updates=updates, loss=loss, epoch=epoch, inside=inside, where=where)


def optimizer_values(optimizer, loaded: dict, wanted: dict) -> list:
    """The values that the fairseq checkpoint ``wanted`` holds for ``optimizer.params``, as new
    CPU tensors, each parameter found by its value in ``loaded``, the checkpoint that the model
    has just been loaded from.

    The optimizer's tensors carry no names (with ``--fp16``, flat master copies).
    ``Trainer.load_checkpoint`` loads the model's (and a criterion's) state dict from the
    checkpoint, then builds the optimizer and hands the scheduler its state and ``lr_step``, so
    until training goes on each parameter holds exactly what ``loaded`` holds under its name
    (under each name, if tied; fp16 and bf16 saved as fp32 by ``utils.move_to_cpu``). A buffer
    or another parameter may hold the same values there: every name that does must hold one
    value in ``wanted``, else it is ambiguous. The optimizer holds what
    ``Trainer._build_optimizer`` gave it: the model's then the criterion's parameters that
    require a gradient; with ``--fp16`` (``FP16Optimizer``: ``fp16_params``, ``fp32_params``)
    fp32 copies of them instead, one per parameter (``--fp16-no-flatten-grads``) or one flat
    tensor per device holding that device's parameters back to back (``build_fp32_params``).
    Raises ValueError saying what does not match.
    """

    def named(state):
        parts = [(part, state.get(part) or {}) for part in ("model", "criterion")]
        return [((part, name), t) for part, ts in parts for name, t in ts.items()]

    before, after = named(loaded), dict(named(wanted))

    def saved(p):
        p = p.detach().cpu()
        names = [name for name, t in before if t.shape == p.shape and torch.equal(*_alike(t, p))]
        if not names:
            raise ValueError("a parameter holds values that the checkpoint loaded does not hold")
        values = []
        for part, name in names:
            value = after.get((part, name))
            if value is None:
                raise ValueError(f"no {part} parameter {name}")
            if value.shape != p.shape:
                raise ValueError(f"{name} is {list(value.shape)}, the model's {list(p.shape)}")
            values.append(value)
        if not all(torch.equal(*_alike(v, values[0])) for v in values[1:]):
            same = " and ".join(name for _, name in names)
            raise ValueError(f"{same} are equal in the checkpoint loaded, not in this one")
        return values[0]

    params = list(optimizer.params)
    master = getattr(optimizer, "fp32_params", None)
    if hasattr(optimizer, "fp16_params") and isinstance(master, dict):  # flat, per device
        on_device = defaultdict(list)
        for p in optimizer.fp16_params:
            if p.requires_grad:
                on_device[p.device.index].append(p)
        sources = [on_device[device] for device in master]
    elif hasattr(optimizer, "fp16_params") and master is not None:
        sources = [[p] for p in optimizer.fp16_params]
    else:
        sources = [[p] for p in params]
    if len(sources) != len(params):
        raise ValueError(f"{len(sources)} parameter groups for {len(params)} optimizer tensors")
    values = []
    for group, p in zip(sources, params):
        flat = torch.cat([saved(q).reshape(-1) for q in group])  # a new tensor, off the file
        if flat.numel() != p.numel():
            raise ValueError(f"{flat.numel()} values for an optimizer tensor of {p.numel()}")
        values.append(flat.to(dtype=p.dtype).view(p.shape))
    return values


def _alike(a, b):
    common = torch.promote_types(a.dtype, b.dtype)  # exact: fp16 or bf16 in fp32
    return a.to(common), b.to(common)


def from_first_rank(read, distributed_world_size: int):
    """``read()`` on data-parallel rank 0, its result (containers of tensors and plain values)
    sent to every rank, as ``Trainer.load_checkpoint`` does with the checkpoint it loads.

    Depends on what the Trainer's ``data_parallel_*`` properties read (one process where
    ``--distributed-world-size`` is 1, else ``distributed_utils.get_data_parallel_group``, its
    rank and its size), and on ``distributed_utils.broadcast_object`` (on CUDA under NCCL), which
    stands ``_TensorPlaceholder`` objects in for the tensors and unpickles them with
    ``torch.load``: torch's safe loader must be told to accept that class.
    """
    from fairseq import utils
    from fairseq.distributed import utils as distributed_utils

    if distributed_world_size <= 1 or distributed_utils.get_data_parallel_world_size() <= 1:
        return read()
    safe_globals = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
    allowed = (
        safe_globals([distributed_utils._TensorPlaceholder]) if safe_globals else nullcontext()
    )
    with allowed:
        result = distributed_utils.broadcast_object(
            read() if distributed_utils.get_data_parallel_rank() == 0 else None,
            src_rank=0,
            group=distributed_utils.get_data_parallel_group(),
        )
    return utils.apply_to_sample(lambda t: t.cpu(), result)  # (move_to_cpu would cast fp16)


def end_load_checkpoint_with(hook) -> None:
    """Has fairseq's ``Trainer.load_checkpoint`` call ``hook(trainer, extra_state)`` before it
    returns ``extra_state`` (None where it loaded no checkpoint).

    fairseq hands a learning-rate scheduler its own state and ``lr_step``, not the checkpoint's
    file, the model or the rest of the config, and has no hook after loading. Depends on
    fairseq-train loading its checkpoint, or finding none, with this method once per launch and
    before any training (``checkpoint_utils.load_checkpoint``), which loads the model, then the
    optimizer and the scheduler's state, and calls ``lr_step``. Replaces the method on the class
    (subclasses too), once per hook.
    """
    from fairseq.trainer import Trainer

    load = Trainer.load_checkpoint
    if getattr(load, "ends_with", None) is hook:
        return

    @functools.wraps(load)
    def load_checkpoint(self, *args, **kwargs):
        extra_state = load(self, *args, **kwargs)
        hook(self, extra_state)
        return extra_state

    load_checkpoint.ends_with = hook
    Trainer.load_checkpoint = load_checkpoint


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


def running_fairseq_command() -> bool:
    """Whether this process is one of fairseq's commands (``fairseq-train``,
    ``fairseq-hydra-train``, ``fairseq-eval-lm``, ``fairseq-generate``, ... or ``python -m
    fairseq_cli.<command>``), or a process that one started with ``torch.multiprocessing.spawn``.

    Only such a process is a program the plugin may change globally (an exception hook, an
    ``atexit`` handler); a notebook, a sweep driver or a test harness that imports the plugin
    keeps its interpreter as it was. Depends on where fairseq keeps its commands: each is a module
    ``fairseq_cli.<command>`` whose function ``cli_main`` fairseq's ``setup.py`` declares as the
    console script's entry point (``fairseq-train = fairseq_cli.train:cli_main``), so the script
    pip writes for it runs ``from fairseq_cli.train import cli_main`` as ``__main__`` (a spawned
    process runs that script again as its ``__main__``), and ``python -m fairseq_cli.train`` runs
    the module itself as ``__main__``, whose ``__spec__`` names it. Not by the program's name:
    this package's own console scripts are called ``fairseq-noise-*``.
    """
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", "").startswith("fairseq_cli."):
        return True
    entry = getattr(main, "cli_main", None)
    return (getattr(entry, "__module__", None) or "").startswith("fairseq_cli.")


def command_common_config(model_cfg):
    """The ``common`` settings (``--cpu``, ``--fp16``, ``--bf16``, ...) of the command that builds
    a model from ``model_cfg``, or None where they cannot be told.

    Depends on ``fairseq_cli.train.main`` calling ``task.build_model(cfg.model)`` with a node of
    its whole OmegaConf config, whose parent (OmegaConf's ``_get_parent``) is the root holding
    ``common``; an argparse model config (``--arch`` of a model without a dataclass) is the whole
    Namespace, ``common``'s flags included.
    """
    get_parent = getattr(model_cfg, "_get_parent", None)
    root = get_parent() if get_parent is not None else None
    if root is not None and "common" in root:
        return root.common
    return model_cfg if hasattr(model_cfg, "fp16") else None


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
