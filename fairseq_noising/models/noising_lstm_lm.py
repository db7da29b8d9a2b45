"""Word-level LSTM language model of Zaremba et al. (2014), as used in Section 4.1 of the paper.

Registered as fairseq model ``noising_lstm_lm`` (config dataclass :class:`NoisingLSTMLMConfig`)
with the architectures

=========================  ======  ======  =======  =========================================
``--arch``                 units   layers  dropout  note
=========================  ======  ======  =======  =========================================
``noising_lstm_lm``        512     2       0.5      dataclass defaults (same as medium)
``noising_lstm_lm_small``  200     2       0.0      Zaremba's small model
``noising_lstm_lm_medium`` 512     2       0.5      paper's "medium" (Table 1)
``noising_lstm_lm_large``  1500    2       0.65     paper's "large" (Table 1)
=========================  ======  ======  =======  =========================================

Every value can be overridden on the command line:

* ``--hidden-size N``   LSTM units per layer; the word embedding has the same size.
* ``--num-layers L``    number of stacked LSTM layers (default 2).
* ``--dropout P``       feed-forward ("non-recurrent") dropout, Zaremba/Pham style: applied to the
  embedding output, between stacked layers (``nn.LSTM(dropout=P)``) and to the output of the top
  layer, i.e. to the output of every LSTM layer and to the embeddings. Never on recurrent
  connections.
* ``--tie-embeddings``  share the input embedding matrix with the output projection weight (the
  output bias stays a separate parameter). Off by default: the paper's models are untied.
* ``--init-range R``    every weight and bias (embedding, LSTM, output projection) is drawn from
  U(-R, R) (default 0.1). The embedding row of ``<pad>`` is then set to zero (it never receives
  gradient from the input side; padding only ever occurs at the end of a row, see below).
* ``--forget-bias B``   then added to every layer's forget-gate bias (default 1.0: the authors'
  TensorFlow ``BasicLSTMCell(forget_bias=1.0)``, which adds 1 to the forget gate's
  pre-activation; 0 leaves the uniform initialisation alone).

Network: ``tokens -> Embedding(V, H) -> dropout -> nn.LSTM(H, H, num_layers=L, dropout=P)``
(one fused call over the whole sequence, time-major, cuDNN on GPU) ``-> dropout ->
Linear(H, V, bias=True)``.

Decoder interface (:class:`NoisingLSTMLMDecoder`; ``model(...)`` forwards all keyword arguments
to it, so the same interface holds for the model)::

    logits, extra = decoder(
        prev_output_tokens,            # LongTensor (B, T)
        src_lengths=None,              # ignored (accepted for fairseq's LM tasks)
        incremental_state=None,        # fairseq incremental decoding cache, see below
        initial_state=None,            # None (zeros) or a pair (h0, c0), each (L, B, H)
        features_only=False,           # True: return the top-layer features instead of logits
    )
    # logits:               FloatTensor (B, T, V)       (or features (B, T, H))
    # extra["final_state"]: pair (h_T, c_T), each (L, B, H): the state after the last column
    # extra["attn"]:        None (no attention)
    # extra["inner_states"]: [top-layer LSTM output, (B, T, H), after dropout]

Stateful truncated BPTT: feed ``initial_state`` with the ``final_state`` of the previous segment
of the same batch rows, *detached* by the caller (``tuple(s.detach() for s in state)``) so that
gradients stop at the segment boundary. Running a sequence in two halves with the state carried
gives the same outputs as running it whole. Rows may be reordered/selected with
``decoder.select_state(state, index)``.

Padding: fairseq's language-modelling datasets pad on the right. The LSTM simply runs over the
pad columns too; since all real tokens come before the padding, the outputs at real positions are
exact, and the outputs at pad positions are ignored by the criterion (pad targets). Note that the
``final_state`` of a right-padded row is therefore the state after the pad columns, not after its
last real token: batches used for state carrying (TBPTT streams) must not contain padding.

Incremental decoding (``fairseq-eval-lm``, ``fairseq-interactive``, the sequence generator): with
an ``incremental_state`` dict, the first call runs over all given tokens (starting from
``initial_state`` or zeros) and caches (h, c); later calls read only ``prev_output_tokens[:, -1:]``
and continue from the cache. ``reorder_incremental_state`` reorders the cache along the batch
dimension (beam search).
"""

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from fairseq.dataclass import FairseqDataclass
from fairseq.models import (
    FairseqIncrementalDecoder,
    FairseqLanguageModel,
    register_model,
    register_model_architecture,
)
from fairseq.modules import FairseqDropout
from fairseq.utils import safe_getattr

DEFAULT_MAX_POSITIONS = 1_000_000  # recurrent: no positional limit


@dataclass
class NoisingLSTMLMConfig(FairseqDataclass):
    hidden_size: int = field(
        default=512,
        metadata={"help": "LSTM units per layer (the word embedding has the same size)"},
    )
    num_layers: int = field(default=2, metadata={"help": "number of stacked LSTM layers"})
    dropout: float = field(
        default=0.5,
        metadata={
            "help": "dropout on the embeddings, between LSTM layers and on the top layer output"
        },
    )
    tie_embeddings: bool = field(
        default=False,
        metadata={"help": "tie the input embedding and the output projection weight"},
    )
    init_range: float = field(
        default=0.1,
        metadata={"help": "initialise every weight and bias uniformly in [-R, R]"},
    )
    forget_bias: float = field(
        default=1.0,
        metadata={
            "help": "added to every LSTM layer's forget-gate bias after initialisation "
            "(TensorFlow's BasicLSTMCell(forget_bias=1.0) of the authors' code; 0: none)"
        },
    )


def add_forget_bias_(lstm: nn.LSTM, value: float):
    """Adds ``value`` to the forget-gate slice of one bias vector of every layer of ``lstm``.

    TensorFlow's ``BasicLSTMCell(forget_bias=b)`` adds b to the forget gate's pre-activation at
    every step; with PyTorch's gate order (input, forget, cell, output) the same pre-activation is
    had by adding b to ``bias_ih_l{k}[H:2H]`` once.
    """
    if not value:
        return
    with torch.no_grad():
        for layer in range(lstm.num_layers):
            getattr(lstm, f"bias_ih_l{layer}")[lstm.hidden_size : 2 * lstm.hidden_size] += value


def init_uniform_(module: nn.Module, init_range: float, padding_idx: Optional[int] = None):
    """Draws every parameter of ``module`` from U(-init_range, init_range)."""
    with torch.no_grad():
        for param in module.parameters():
            param.uniform_(-init_range, init_range)
        if padding_idx is not None and isinstance(module, nn.Embedding):
            module.weight[padding_idx].zero_()


class NoisingLSTMLMDecoder(FairseqIncrementalDecoder):
    """Embedding -> dropout -> fused multi-layer nn.LSTM -> dropout -> Linear. See module doc."""

    supports_initial_state = True  # forward(..., initial_state=(h, c)): stateful BPTT

    def __init__(
        self,
        dictionary,
        hidden_size: int = 512,
        num_layers: int = 2,
        dropout: float = 0.5,
        tie_embeddings: bool = False,
        init_range: float = 0.1,
        forget_bias: float = 1.0,
        max_positions: int = DEFAULT_MAX_POSITIONS,
    ):
        super().__init__(dictionary)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.tie_embeddings = tie_embeddings
        self._max_positions = max_positions
        self.padding_idx = dictionary.pad()
        num_embeddings = len(dictionary)

        self.embed_tokens = nn.Embedding(num_embeddings, hidden_size, padding_idx=self.padding_idx)
        self.dropout_in = FairseqDropout(dropout, module_name=self.__class__.__name__)
        # nn.LSTM's dropout acts on the outputs of every layer except the last one
        self.lstm = nn.LSTM(
            input_size=hidden_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
            batch_first=False,
        )
        self.dropout_out = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.output_projection = nn.Linear(hidden_size, num_embeddings, bias=True)

        init_uniform_(self.lstm, init_range)
        add_forget_bias_(self.lstm, forget_bias)
        init_uniform_(self.output_projection, init_range)
        init_uniform_(self.embed_tokens, init_range, self.padding_idx)
        if tie_embeddings:
            self.output_projection.weight = self.embed_tokens.weight

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        prev_output_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        initial_state: Optional[Tuple[Tensor, Tensor]] = None,
        features_only: bool = False,
        **unused,
    ):
        x, extra = self.extract_features(
            prev_output_tokens, incremental_state=incremental_state, initial_state=initial_state
        )
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(
        self,
        prev_output_tokens: Tensor,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        initial_state: Optional[Tuple[Tensor, Tensor]] = None,
        **unused,
    ):
        state: Optional[Tuple[Tensor, Tensor]] = initial_state
        if incremental_state is not None:
            cached = self.get_incremental_state(incremental_state, "cached_state")
            if cached is not None:
                prev_output_tokens = prev_output_tokens[:, -1:]
                state = (cached["h"], cached["c"])

        bsz = prev_output_tokens.size(0)
        # (B, T) -> (T, B): time-major, the native layout of cuDNN's LSTM
        x = self.embed_tokens(prev_output_tokens.t())
        x = self.dropout_in(x)
        if state is None:
            zeros = x.new_zeros(self.num_layers, bsz, self.hidden_size)
            state = (zeros, zeros)
        else:
            self._check_state(state, bsz)
        x, (h, c) = self.lstm(x, (state[0].to(x.dtype), state[1].to(x.dtype)))
        x = self.dropout_out(x)
        x = x.transpose(0, 1)  # (B, T, H)

        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "cached_state", {"h": h, "c": c})
        return x, {"attn": None, "inner_states": [x], "final_state": (h, c)}

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(features)

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

    def reorder_incremental_state(
        self,
        incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
        new_order: Tensor,
    ):
        cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is None:
            return
        self.set_incremental_state(
            incremental_state,
            "cached_state",
            {"h": cached["h"].index_select(1, new_order), "c": cached["c"].index_select(1, new_order)},
        )

    def max_positions(self):
        return self._max_positions


@register_model("noising_lstm_lm", dataclass=NoisingLSTMLMConfig)
class NoisingLSTMLanguageModel(FairseqLanguageModel):
    """Zaremba et al. (2014) LSTM language model; see the module docstring."""

    def __init__(self, decoder):
        super().__init__(decoder)

    @classmethod
    def build_model(cls, args, task):
        base_architecture(args)
        decoder = NoisingLSTMLMDecoder(
            dictionary=task.target_dictionary,
            hidden_size=args.hidden_size,
            num_layers=args.num_layers,
            dropout=args.dropout,
            tie_embeddings=args.tie_embeddings,
            init_range=args.init_range,
            forget_bias=args.forget_bias,
        )
        return cls(decoder)


def _set_defaults(args, **defaults):
    for key, value in defaults.items():
        if safe_getattr(args, key, None) is None:
            setattr(args, key, value)


def base_architecture(args):
    """Fills every option still unset with the dataclass defaults."""
    defaults = {
        name: f.default
        for name, f in NoisingLSTMLMConfig.__dataclass_fields__.items()
        if not name.startswith("_")
    }
    _set_defaults(args, **defaults)


@register_model_architecture("noising_lstm_lm", "noising_lstm_lm_small")
def noising_lstm_lm_small(args):
    _set_defaults(args, hidden_size=200, num_layers=2, dropout=0.0)
    base_architecture(args)


@register_model_architecture("noising_lstm_lm", "noising_lstm_lm_medium")
def noising_lstm_lm_medium(args):
    _set_defaults(args, hidden_size=512, num_layers=2, dropout=0.5)
    base_architecture(args)


@register_model_architecture("noising_lstm_lm", "noising_lstm_lm_large")
def noising_lstm_lm_large(args):
    _set_defaults(args, hidden_size=1500, num_layers=2, dropout=0.65)
    base_architecture(args)
