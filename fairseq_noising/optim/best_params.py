"""The best epoch's parameters for ``--lr-scheduler paper_halving``: kept on the CPU, copied back.

See docs/paper_halving.md ("Restoring the best parameters").
"""

import torch

from fairseq_noising import fairseq_compat
from fairseq_noising.errors import NoisingError


class BestParameters:
    """A CPU copy of the parameters that a fairseq optimizer updates, taken at the best epoch.

    ``update`` is the one way it is used: after an epoch's decision it either keeps the current
    parameters as the best or copies the kept ones back in place. ``tensors`` (a list of CPU
    tensors aligned with ``optimizer.params``, or None) is what the scheduler's state stores.
    With ``enabled=False`` (``--no-restore-best``) it keeps nothing and restores nothing.
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

    def load(self, saved):
        """Takes ``tensors`` from a checkpoint (None: nothing kept), checked against the model."""
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
