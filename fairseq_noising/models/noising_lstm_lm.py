"""Word-level LSTM language model of Zaremba et al. (2014), Section 4.1 of the paper.

Fairseq model ``noising_lstm_lm`` (config :class:`NoisingLSTMLMConfig`), architectures
``noising_lstm_lm_small`` / ``_medium`` / ``_large``. The decoder takes an ``initial_state`` and
returns its ``final_state`` (stateful truncated BPTT). Architectures, options, the decoder
interface, state carrying and padding: ``docs/models.md``.
"""

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from fairseq.models import FairseqLanguageModel, register_model
from torch import Tensor

from .lstm_layers import (
    IncrementalState,
    LSTMDecoderBase,
    LSTMStackConfig,
    option,
    register_sizes,
    set_defaults,
)


@dataclass
class NoisingLSTMLMConfig(LSTMStackConfig):
    dropout: float = option(
        0.5, "dropout on the embeddings, between LSTM layers and on the top layer output"
    )
    forget_bias: float = option(
        1.0,
        "added to every LSTM layer's forget-gate bias after initialisation "
        "(TensorFlow's BasicLSTMCell(forget_bias=1.0) of the authors' code; 0: none)",
    )
    tie_embeddings: bool = option(False, "tie the input embedding and the output projection weight")


class NoisingLSTMLMDecoder(LSTMDecoderBase):
    """Embedding -> dropout -> fused multi-layer nn.LSTM -> dropout -> Linear (docs/models.md).

    ``cfg``: any object with the fields of :class:`NoisingLSTMLMConfig`, all set."""

    supports_initial_state = True  # forward(..., initial_state=(h, c)): stateful BPTT

    def __init__(self, cfg, dictionary):
        super().__init__(dictionary)
        self.tie_embeddings = cfg.tie_embeddings
        self.build_lstm_stack(cfg, dictionary)
        self.build_output_projection(dictionary)
        self.init_parameters_(cfg, self.output_projection)
        if cfg.tie_embeddings:
            self.output_projection.weight = self.embed_tokens.weight

    def forward(
        self,
        prev_output_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        incremental_state: Optional[IncrementalState] = None,
        initial_state: Optional[Tuple[Tensor, Tensor]] = None,
        features_only: bool = False,
        **unused,
    ):
        # (src_lengths is accepted for fairseq's LM tasks and ignored)
        return super().forward(
            prev_output_tokens,
            incremental_state=incremental_state,
            initial_state=initial_state,
            features_only=features_only,
        )

    def extract_features(
        self,
        prev_output_tokens: Tensor,
        incremental_state: Optional[IncrementalState] = None,
        initial_state: Optional[Tuple[Tensor, Tensor]] = None,
        **unused,
    ):
        prev_output_tokens, cached = self.read_cache(prev_output_tokens, incremental_state)
        state = initial_state if cached is None else (cached["h"], cached["c"])
        bsz = prev_output_tokens.size(0)
        x = self.embed(prev_output_tokens)  # (T, B, H)
        if state is None:
            zeros = x.new_zeros(self.num_layers, bsz, self.hidden_size)
            state = (zeros, zeros)
        else:
            self._check_state(state, bsz)
        x, (h, c) = self.lstm(x, (state[0].to(x.dtype), state[1].to(x.dtype)))
        x = self.dropout_out(x).transpose(0, 1)  # (B, T, H)
        self.write_cache(incremental_state, h=h, c=c)
        return x, {"attn": None, "inner_states": [x], "final_state": (h, c)}

    def _check_state(self, state: Tuple[Tensor, Tensor], bsz: int):
        expected = (self.num_layers, bsz, self.hidden_size)
        for s in state:
            if tuple(s.shape) != expected:
                raise ValueError(
                    f"initial_state tensors must have shape (num_layers, batch, hidden) = "
                    f"{expected}, got {tuple(s.shape)}"
                )

    # ------------------------------------------------------------------ state helpers
    def zero_state(self, bsz: int, device=None, dtype=None) -> Tuple[Tensor, Tensor]:
        """A zero (h, c) pair for ``bsz`` rows, each (L, bsz, H)."""
        w = self.embed_tokens.weight
        zeros = torch.zeros(
            self.num_layers,
            bsz,
            self.hidden_size,
            device=device if device is not None else w.device,
            dtype=dtype if dtype is not None else w.dtype,
        )
        return zeros, zeros.clone()

    @staticmethod
    def select_state(state: Tuple[Tensor, Tensor], index: Tensor) -> Tuple[Tensor, Tensor]:
        """Selects/reorders batch rows of an (h, c) state (batch is dimension 1)."""
        return state[0].index_select(1, index), state[1].index_select(1, index)

    @staticmethod
    def detach_state(state: Tuple[Tensor, Tensor]) -> Tuple[Tensor, Tensor]:
        return state[0].detach(), state[1].detach()


@register_model("noising_lstm_lm", dataclass=NoisingLSTMLMConfig)
class NoisingLSTMLanguageModel(FairseqLanguageModel):
    """Zaremba et al. (2014) LSTM language model; see docs/models.md."""

    config_class = NoisingLSTMLMConfig  # each size's subclass has its own (register_sizes)

    @classmethod
    def build_model(cls, args, task):
        set_defaults(args, cls.config_class)  # options the command line or config left unset
        return cls(NoisingLSTMLMDecoder(args, task.target_dictionary))


# the sizes, each a model of its own (--arch or Hydra's model._name); ``noising_lstm_lm`` has the
# dataclass defaults (= medium)
SIZES = {
    "noising_lstm_lm_small": dict(hidden_size=200, num_layers=2, dropout=0.0),  # Zaremba's small
    "noising_lstm_lm_medium": dict(hidden_size=512, num_layers=2, dropout=0.5),  # paper's medium
    "noising_lstm_lm_large": dict(hidden_size=1500, num_layers=2, dropout=0.65),  # paper's large
}
register_sizes(NoisingLSTMLanguageModel, SIZES)
