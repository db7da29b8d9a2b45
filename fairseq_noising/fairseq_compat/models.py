"""What a fairseq decoder's output and class say about state carried across batches."""

from typing import Optional, Tuple

import torch


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
