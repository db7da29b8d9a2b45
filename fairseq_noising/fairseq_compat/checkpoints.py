"""fairseq's checkpoints and how its trainer loads them: which file fairseq-train resumes from,
where in training a checkpoint was saved, the optimizer's tensors in a checkpoint, a read on the
first data-parallel rank sent to the others, a hook after ``Trainer.load_checkpoint``, and the
running bests that decide ``checkpoint_best.pt``.
"""

import functools
import os
import sys
from collections import defaultdict
from contextlib import nullcontext
from typing import Tuple

import torch
from fairseq import checkpoint_utils


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
