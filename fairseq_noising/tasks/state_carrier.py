"""Carries an LSTM's hidden state from one batch to the next (stateful truncated BPTT).

The carrier keeps one state per mode ("train" and "eval", so that validating in the middle of
training does not disturb the training state), captures each forward's ``final_state`` with a
forward hook on the decoder, detaches it (gradients stop at batch boundaries), and hands it to
the next batch of the same mode as ``net_input["initial_state"]``. The task resets the training
state at the start of every epoch and the evaluation state at the start of every pass over an
evaluation split.
"""

from typing import Dict, Optional, Tuple

import torch

from ..fairseq_compat import final_state

State = Tuple[torch.Tensor, torch.Tensor]


class StateCarrier:
    def __init__(self):
        self.states: Dict[str, Optional[State]] = {"train": None, "eval": None}

    def reset(self, mode: str) -> None:
        self.states[mode] = None

    def attach(self, decoder: torch.nn.Module) -> None:
        decoder.register_forward_hook(self._capture)

    def _capture(self, module, inputs, output):
        state = final_state(output)
        if state is not None:
            self.states["train" if module.training else "eval"] = state

    def inject(self, sample: dict, mode: str) -> dict:
        """Puts the carried state into ``sample["net_input"]`` when it fits the batch's rows."""
        state = self.states[mode]
        if not sample or "net_input" not in sample:
            return sample
        rows = sample["net_input"]["src_tokens"].size(0)
        if state is not None and state[0].size(1) == rows:
            sample["net_input"]["initial_state"] = state
        else:
            sample["net_input"].pop("initial_state", None)
        return sample


class InjectingIterator:
    """Wraps a batch iterator so that every batch carries the state left by the previous one.

    Batches are produced lazily, so batch i+1 is made only after the model has run batch i
    (as ``fairseq-eval-lm`` does).
    """

    def __init__(self, iterator, carrier: StateCarrier, mode: str):
        self.iterator = iterator
        self.carrier = carrier
        self.mode = mode

    def __len__(self):
        return len(self.iterator)

    def __iter__(self):
        for sample in self.iterator:
            yield self.carrier.inject(sample, self.mode)
