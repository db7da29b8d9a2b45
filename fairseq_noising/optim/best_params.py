"""The best epoch's parameters for ``--lr-scheduler paper_halving``: kept on the CPU, copied back,
and read back from ``checkpoint_best.pt`` after a resume.

See docs/paper_halving.md ("Restoring the best parameters", "Resuming").
"""

import os

import torch

from fairseq_noising import fairseq_compat
from fairseq_noising.errors import NoisingError


class BestParameters:
    """A CPU copy of the parameters that a fairseq optimizer updates, taken at the best epoch.

    ``update`` is the one way it is used: after an epoch's decision it either keeps the current
    parameters as the best or copies the kept ones back in place. ``tensors`` is a list of CPU
    tensors aligned with ``optimizer.params``, or None. With ``enabled=False``
    (``--no-restore-best``) it keeps nothing and restores nothing.
    """

    def __init__(self, optimizer, enabled=True):
        self.optimizer = optimizer
        self.enabled = enabled
        self.tensors = None

    def update(self, is_best: bool) -> bool:
        """Keep the parameters if ``is_best``, else restore the kept ones; True if it restored."""
        if not self.enabled:
            return False
        if is_best:
            self._snapshot()
            return False
        if self.tensors is None:
            return False
        self._restore()
        return True

    def _snapshot(self):
        # new tensors each time: a checkpoint still being written may hold the previous ones
        with torch.no_grad():
            self.tensors = [p.detach().to("cpu", copy=True) for p in self.optimizer.params]

    def _restore(self):
        # in place, so that the optimizer, DDP and the model keep referring to the same tensors
        with torch.no_grad():
            for p, saved in zip(self.optimizer.params, self.tensors):
                p.copy_(saved)
        fairseq_compat.sync_fp16_model(self.optimizer)  # --fp16: params are the fp32 master copy
        # momentum buffers and Adam moments belong to the abandoned trajectory
        state = getattr(getattr(self.optimizer, "optimizer", None), "state", None)
        if state is not None:
            state.clear()

    def are_current(self, tensors) -> bool:
        """Whether ``tensors`` hold exactly the values that the optimizer's parameters hold now."""
        params = list(self.optimizer.params)
        return len(tensors) == len(params) and all(
            torch.equal(t, p.detach().to(device="cpu", dtype=t.dtype))
            for t, p in zip(tensors, params)
        )

    def load(self, saved):
        """Takes ``tensors`` kept in a checkpoint's scheduler state (None: none), checked against
        the model."""
        if saved is None or not self.enabled:
            self.tensors = None
            return
        params = list(self.optimizer.params)
        if len(saved) != len(params) or any(s.shape != p.shape for s, p in zip(saved, params)):
            raise NoisingError(
                "--lr-scheduler paper_halving: the best parameters in the checkpoint do not match "
                f"the model ({len(saved)} tensors for {len(params)} parameters); pass "
                "--reset-lr-scheduler to start the protocol afresh"
            )
        self.tensors = [
            s.detach().to(device="cpu", dtype=p.dtype, copy=True) for s, p in zip(saved, params)
        ]


def read_best_checkpoint(trainer, optimizer) -> dict:
    """What ``checkpoint_best.pt`` holds, for a scheduler that resumes without a kept copy.

    Returns ``{"path", "tensors", ...}``: its values of ``optimizer.params`` (new CPU tensors)
    and where it was saved (:func:`.fairseq_compat.checkpoint_position`: updates, loss, ...); or
    ``{"path", "error"}`` saying why it cannot be used. Under data-parallel training rank 0 reads the file and every rank gets the result.
    """
    if trainer is None:
        return {
            "path": "checkpoint_best.pt",
            "error": "cannot be located: the scheduler is not driven by a fairseq Trainer",
        }
    path = fairseq_compat.checkpoint_path(trainer, "checkpoint_best")
    return fairseq_compat.from_first_rank(trainer, lambda: _read(path, trainer, optimizer))


def _read(path, trainer, optimizer):
    if not os.path.isfile(path):
        return {"path": path, "error": "is missing"}
    try:  # mmap: only the tensors used are read from disk
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # a truncated or foreign file: zip, pickle or torch errors
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return {"path": path, "error": f"cannot be read ({reason})"}
    position = fairseq_compat.checkpoint_position(state)
    try:
        tensors = fairseq_compat.optimizer_values(trainer, optimizer, state)
    except ValueError as e:
        return {"path": path, "error": f"does not match the model ({e})"}
    return {"path": path, "tensors": tensors, **position}
