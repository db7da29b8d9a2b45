"""The best epoch's parameters for ``--lr-scheduler paper_halving``: kept on the CPU, copied back,
and read back from ``checkpoint_best.pt`` after a resume.

See docs/paper_halving.md ("Restoring the best parameters", "Resuming").
"""

import os

import torch

from fairseq_noising import fairseq_compat
from fairseq_noising.errors import NoisingError


class BestParameters:
    """A CPU copy of the parameters that a fairseq optimizer updates, taken at the best epoch
    (``tensors``, aligned with ``optimizer.params``, or None); ``enabled=False`` keeps nothing."""

    def __init__(self, optimizer, enabled=True):
        self.optimizer = optimizer
        self.enabled = enabled
        self.tensors = None

    @property
    def to_read_back(self) -> bool:
        """Wanted but not held: after a resume, read back from checkpoint_best.pt."""
        return self.enabled and self.tensors is None

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


def read_checkpoint(path):
    """(the fairseq checkpoint at ``path``, None), or (None, why it cannot be read). Torch's safe
    loader, the tensors memory-mapped: only those used are read from disk."""
    if not os.path.isfile(path):
        return None, "is missing"
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True), None
    except Exception as e:  # a truncated or foreign file: zip, pickle or torch errors
        return None, f"cannot be read ({(str(e).strip().splitlines() or [type(e).__name__])[0]})"


def read_best_checkpoint(path, optimizer, loaded, best) -> dict:
    """``{"tensors"}``: the values of ``optimizer.params`` in ``checkpoint_best.pt`` at ``path``
    (new CPU tensors), if it was saved at the validation ``best`` (its updates and value); or
    ``{"error"}`` saying why not. ``loaded`` is the checkpoint being loaded: a parameter's value
    there says which of the file's tensors is its (:func:`.fairseq_compat.optimizer_values`)."""
    state, problem = read_checkpoint(path)
    if state is not None:
        saved = fairseq_compat.checkpoint_position(state)
        if (saved["updates"], saved["loss"]) != (best["updates"], best["loss"]):
            problem = f"holds {saved['where']} (valid {saved['loss']})"
        else:
            try:
                return {"tensors": fairseq_compat.optimizer_values(optimizer, loaded, state)}
            except ValueError as e:
                problem = f"does not match the model ({e})"
    return {"error": problem}
