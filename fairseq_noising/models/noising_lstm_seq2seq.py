"""LSTM encoder-decoder with Luong et al. (2015) global dot attention and input feeding.

This is the translation model of Section 4.2 of the paper (IWSLT'15 En-De): a two-layer LSTM
encoder and decoder with 512 units, global attention with the *dot* alignment score, input
feeding, dropout 0.2, uniform [-0.1, 0.1] initialisation and a reversed source (Sutskever et al.,
2014).

Registered as fairseq model ``noising_lstm_seq2seq`` with the architectures

==============================  =====  ======  =======  ==============
``--arch``                      units  layers  dropout  reverse source
==============================  =====  ======  =======  ==============
``noising_lstm_seq2seq``        512    2       0.2      yes
``noising_lstm_iwslt_en_de``    512    2       0.2      yes  (the paper's)
``noising_lstm_seq2seq_tiny``   16     2       0.0      yes  (tests)
==============================  =====  ======  =======  ==============

Command-line options (each overrides the architecture's value):

* ``--hidden-size N``      LSTM units per layer in encoder and decoder; embeddings have size N too.
* ``--num-layers L``       stacked LSTM layers in encoder and in decoder.
* ``--dropout P``          dropout on the encoder and decoder embeddings, between stacked LSTM layers
  (``nn.LSTM(dropout=P)``), on the encoder's top-layer outputs and on the attentional hidden state
  h~_t (which feeds both the softmax layer and, through input feeding, the next step). As in
  fairseq's ``lstm`` model, the decoder's top-layer h_t enters the attention undropped.
* ``--init-range R``       every weight and bias drawn from U(-R, R) (default 0.1); ``<pad>`` rows of
  the embeddings are then zeroed.
* ``--forget-bias B``      added to every LSTM layer's forget-gate bias after initialisation
  (default 0). Unlike the language model (1.0, the authors' TensorFlow ``BasicLSTMCell``), the
  encoder-decoder keeps 0: the paper's translation set-up follows Luong et al. (2015), whose
  models draw every parameter from U(-0.1, 0.1) with no forget-gate offset, and the authors'
  translation code, which could say otherwise, is not public.
* ``--reverse-source`` / ``--no-reverse-source``  read the source sentence backwards.

Equations (per target step t, decoder top-layer state h_t, encoder top-layer outputs h_s)::

    x_t      = [ dropout(emb(y_{t-1})) ; h~_{t-1} ]          (input feeding, h~_0 = 0)
    h_t      = LSTM_stack(x_t, state_{t-1})                   (state_0 = encoder final (h, c))
    a_t(s)   = softmax_s( h_t . h_s )   over non-pad source positions s (pads get weight 0)
    c_t      = sum_s a_t(s) h_s
    h~_t     = dropout( tanh( W_c [c_t ; h_t] ) )             (W_c without bias)
    p(y_t)   = softmax( W_s h~_t + b_s )

Source reversal: fairseq sources look like ``w_1 ... w_n </s>`` and are left-padded by default
(right padding works too; rows are assumed to have their real tokens contiguous). With reversal on,
the encoder reads ``w_n ... w_1 </s>``: the real tokens are reversed, a trailing ``</s>`` stays
last, and padding is untouched. Nothing else changes: the encoder outputs are put back at the
position of the token they were computed for, so ``encoder_out["encoder_out"][:, b, j]`` belongs
to ``src_tokens[b, j]`` and the attention weights returned by the decoder line up with the given
``src_tokens`` (e.g. for ``--print-alignment``). A model with reversal on, given ``s``, computes
exactly what the same model with reversal off computes given the reversed ``s`` (with the
attention weights permuted accordingly).

Encoder: one fused ``nn.LSTM`` call over a packed (right-aligned internally) batch. Decoder: one
fused single-step ``nn.LSTM(num_layers=L)`` call per target position (input feeding makes the
recurrence step-wise), batched matrix products for the attention, one projection to the vocabulary
over all positions at the end.

Interfaces::

    encoder_out = model.encoder(src_tokens (B, S), src_lengths (B,))  # lengths are recomputed
                                                                      # from the non-pad tokens
    # dict: "encoder_out": [Tensor (S, B, H)]   top-layer outputs at the source token positions
    #       "encoder_padding_mask": [BoolTensor (B, S)]  True at <pad>
    #       "encoder_final_h": [Tensor (L, B, H)], "encoder_final_c": [Tensor (L, B, H)]
    logits, extra = model.decoder(prev_output_tokens (B, T), encoder_out, incremental_state=None)
    # logits (B, T, V); extra["attn"] = [Tensor (B, T, S)] (rows sum to 1 over non-pad sources)

Incremental decoding (``fairseq-generate`` beam search) caches (h, c) and the input feed;
``reorder_incremental_state`` and ``reorder_encoder_out`` reorder them along the batch dimension.
"""

from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.modules import FairseqDropout

from .noising_lstm_lm import DEFAULT_MAX_POSITIONS, add_forget_bias_, init_uniform_


def reading_order(
    src_tokens: Tensor, padding_idx: int, eos_idx: Optional[int], reverse: bool
) -> Tuple[Tensor, Tensor]:
    """For each source position, the time step at which the encoder reads it.

    Returns ``(order, lengths)``: ``order`` (B, S) is, per row, a permutation of ``0..S-1`` mapping
    position j to its reading step (real tokens first, in reading order, then the pads), and
    ``lengths`` (B,) the number of real tokens. Real tokens of a row must be contiguous (left or
    right padding). With ``reverse`` the real tokens are read backwards, except a trailing
    ``eos_idx`` which is still read last.
    """
    bsz, srclen = src_tokens.shape
    real = src_tokens.ne(padding_idx)
    lengths = real.long().sum(dim=1)
    rank = real.long().cumsum(dim=1) - 1  # rank among the real tokens (valid where real)
    pad_rank = (~real).long().cumsum(dim=1) - 1
    if reverse:
        last_pos = (real.long().cumsum(dim=1) == lengths.unsqueeze(1)) & real
        if eos_idx is not None:
            ends_with_eos = (src_tokens.eq(eos_idx) & last_pos).any(dim=1)
            n_rev = lengths - ends_with_eos.long()
        else:
            n_rev = lengths
        n_rev = n_rev.unsqueeze(1)
        rank = torch.where(rank < n_rev, n_rev - 1 - rank, rank)
    order = torch.where(real, rank, lengths.unsqueeze(1) + pad_rank)
    return order, lengths


def reverse_source_tokens(src_tokens: Tensor, padding_idx: int, eos_idx: Optional[int]) -> Tensor:
    """The source as the encoder reads it with ``--reverse-source``, in the original padding
    layout: real tokens reversed (a trailing eos kept last), pads untouched."""
    order, _ = reading_order(src_tokens, padding_idx, eos_idx, reverse=False)
    rev_order, _ = reading_order(src_tokens, padding_idx, eos_idx, reverse=True)
    # token at position j goes to the position whose unreversed reading step is rev_order[j]
    pos_of_step = torch.empty_like(order).scatter_(
        1, order, torch.arange(order.size(1), device=order.device).expand_as(order).contiguous()
    )
    target_pos = pos_of_step.gather(1, rev_order)
    return torch.empty_like(src_tokens).scatter_(1, target_pos, src_tokens)


class NoisingLSTMEncoder(FairseqEncoder):
    def __init__(
        self,
        dictionary,
        hidden_size: int = 512,
        num_layers: int = 2,
        dropout: float = 0.2,
        reverse_source: bool = True,
        init_range: float = 0.1,
        forget_bias: float = 0.0,
        max_positions: int = DEFAULT_MAX_POSITIONS,
    ):
        super().__init__(dictionary)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.reverse_source = reverse_source
        self.padding_idx = dictionary.pad()
        self.eos_idx = dictionary.eos()
        self._max_positions = max_positions

        self.embed_tokens = nn.Embedding(len(dictionary), hidden_size, padding_idx=self.padding_idx)
        self.dropout_in = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.lstm = nn.LSTM(
            hidden_size, hidden_size, num_layers=num_layers, dropout=dropout if num_layers > 1 else 0.0
        )
        self.dropout_out = FairseqDropout(dropout, module_name=self.__class__.__name__)
        init_uniform_(self.lstm, init_range)
        add_forget_bias_(self.lstm, forget_bias)
        init_uniform_(self.embed_tokens, init_range, self.padding_idx)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **unused):
        bsz, srclen = src_tokens.shape
        order, lengths = reading_order(
            src_tokens, self.padding_idx, self.eos_idx, reverse=self.reverse_source
        )
        # tokens in reading order, right-padded: read[b, order[b, j]] = src[b, j]
        read_tokens = torch.empty_like(src_tokens).scatter_(1, order, src_tokens)

        x = self.embed_tokens(read_tokens.t())  # (S, B, H)
        x = self.dropout_in(x)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False)
        packed_out, (h, c) = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(packed_out, total_length=srclen)  # (S, B, H)
        out = self.dropout_out(out)
        # put every output back at the position of the token it was computed for
        out = out.gather(0, order.t().unsqueeze(-1).expand(-1, -1, self.hidden_size))
        padding_mask = src_tokens.eq(self.padding_idx)
        out = out.masked_fill(padding_mask.t().unsqueeze(-1), 0.0)
        return {
            "encoder_out": [out],  # (S, B, H)
            "encoder_padding_mask": [padding_mask],  # (B, S)
            "encoder_final_h": [h],  # (L, B, H)
            "encoder_final_c": [c],  # (L, B, H)
            "src_tokens": [],
            "src_lengths": [lengths],
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        return {
            "encoder_out": [encoder_out["encoder_out"][0].index_select(1, new_order)],
            "encoder_padding_mask": [encoder_out["encoder_padding_mask"][0].index_select(0, new_order)],
            "encoder_final_h": [encoder_out["encoder_final_h"][0].index_select(1, new_order)],
            "encoder_final_c": [encoder_out["encoder_final_c"][0].index_select(1, new_order)],
            "src_tokens": [],
            "src_lengths": [t.index_select(0, new_order) for t in encoder_out["src_lengths"]],
        }

    def max_positions(self):
        return self._max_positions


class NoisingLSTMAttentionDecoder(FairseqIncrementalDecoder):
    def __init__(
        self,
        dictionary,
        hidden_size: int = 512,
        num_layers: int = 2,
        dropout: float = 0.2,
        init_range: float = 0.1,
        forget_bias: float = 0.0,
        max_positions: int = DEFAULT_MAX_POSITIONS,
    ):
        super().__init__(dictionary)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.padding_idx = dictionary.pad()
        self._max_positions = max_positions
        self.need_attn = True

        self.embed_tokens = nn.Embedding(len(dictionary), hidden_size, padding_idx=self.padding_idx)
        self.dropout_in = FairseqDropout(dropout, module_name=self.__class__.__name__)
        # input feeding: the first layer reads [embedding ; h~_{t-1}]
        self.lstm = nn.LSTM(
            2 * hidden_size,
            hidden_size,
            num_layers=num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.attn_combine = nn.Linear(2 * hidden_size, hidden_size, bias=False)  # W_c
        self.dropout_out = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.output_projection = nn.Linear(hidden_size, len(dictionary), bias=True)  # W_s, b_s
        init_uniform_(self.lstm, init_range)
        add_forget_bias_(self.lstm, forget_bias)
        init_uniform_(self.attn_combine, init_range)
        init_uniform_(self.output_projection, init_range)
        init_uniform_(self.embed_tokens, init_range, self.padding_idx)

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        features_only: bool = False,
        **unused,
    ):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        **unused,
    ):
        assert encoder_out is not None, "the attention decoder needs encoder_out"
        enc = encoder_out["encoder_out"][0].transpose(0, 1)  # (B, S, H)
        enc_mask = encoder_out["encoder_padding_mask"][0]  # (B, S)

        cached = None
        if incremental_state is not None:
            cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            h, c, input_feed = cached["h"], cached["c"], cached["input_feed"]
        else:
            h = encoder_out["encoder_final_h"][0]
            c = encoder_out["encoder_final_c"][0]
            input_feed = enc.new_zeros(enc.size(0), self.hidden_size)

        bsz, tgtlen = prev_output_tokens.shape
        emb = self.dropout_in(self.embed_tokens(prev_output_tokens.t()))  # (T, B, H)
        # additive mask: -inf on pads -> exactly zero weight after the softmax
        score_mask = enc_mask.unsqueeze(1)  # (B, 1, S)

        outs = []
        attns = []
        for t in range(tgtlen):
            step_in = torch.cat((emb[t], input_feed), dim=1).unsqueeze(0)  # (1, B, 2H)
            top, (h, c) = self.lstm(step_in, (h, c))
            top = top[0]  # (B, H), undropped top-layer h_t
            scores = torch.bmm(top.unsqueeze(1), enc.transpose(1, 2))  # (B, 1, S)
            scores = scores.float().masked_fill(score_mask, float("-inf"))
            attn = F.softmax(scores, dim=-1).type_as(top)  # (B, 1, S)
            context = torch.bmm(attn, enc).squeeze(1)  # (B, H)
            attn_h = torch.tanh(self.attn_combine(torch.cat((context, top), dim=1)))
            attn_h = self.dropout_out(attn_h)
            input_feed = attn_h
            outs.append(attn_h)
            attns.append(attn.squeeze(1))

        x = torch.stack(outs, dim=1)  # (B, T, H)
        attn_all = torch.stack(attns, dim=1)  # (B, T, S)

        if incremental_state is not None:
            self.set_incremental_state(
                incremental_state, "cached_state", {"h": h, "c": c, "input_feed": input_feed}
            )
        return x, {"attn": [attn_all], "inner_states": [x], "final_state": (h, c)}

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(features)

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
            {
                "h": cached["h"].index_select(1, new_order),
                "c": cached["c"].index_select(1, new_order),
                "input_feed": cached["input_feed"].index_select(0, new_order),
            },
        )

    def max_positions(self):
        return self._max_positions

    def make_generation_fast_(self, need_attn=False, **kwargs):
        self.need_attn = need_attn


@register_model("noising_lstm_seq2seq")
class NoisingLSTMSeq2SeqModel(FairseqEncoderDecoderModel):
    """Luong et al. (2015) attention encoder-decoder; see the module docstring."""

    @staticmethod
    def add_args(parser):
        # fmt: off
        parser.add_argument('--hidden-size', type=int, metavar='N',
                            help='LSTM units per layer (embeddings have the same size)')
        parser.add_argument('--num-layers', type=int, metavar='N',
                            help='stacked LSTM layers in the encoder and in the decoder')
        parser.add_argument('--dropout', type=float, metavar='D',
                            help='dropout on embeddings, between LSTM layers, on encoder outputs '
                                 'and on the attentional hidden state')
        parser.add_argument('--init-range', type=float, metavar='R',
                            help='initialise every weight and bias uniformly in [-R, R]')
        parser.add_argument('--forget-bias', type=float, metavar='B',
                            help='added to every LSTM layer\'s forget-gate bias after '
                                 'initialisation (default 0: Luong et al.\'s uniform init)')
        parser.add_argument('--reverse-source', dest='reverse_source', action='store_const',
                            const=True, help='read the source sentence backwards (default)')
        parser.add_argument('--no-reverse-source', dest='reverse_source', action='store_const',
                            const=False, help='read the source sentence in its given order')
        # fmt: on

    @classmethod
    def build_model(cls, args, task):
        base_architecture(args)
        encoder = NoisingLSTMEncoder(
            task.source_dictionary,
            hidden_size=args.hidden_size,
            num_layers=args.num_layers,
            dropout=args.dropout,
            reverse_source=args.reverse_source,
            init_range=args.init_range,
            forget_bias=args.forget_bias,
        )
        decoder = NoisingLSTMAttentionDecoder(
            task.target_dictionary,
            hidden_size=args.hidden_size,
            num_layers=args.num_layers,
            dropout=args.dropout,
            init_range=args.init_range,
            forget_bias=args.forget_bias,
        )
        return cls(encoder, decoder)


def _set_defaults(args, **defaults):
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)


@register_model_architecture("noising_lstm_seq2seq", "noising_lstm_seq2seq")
def base_architecture(args):
    _set_defaults(
        args, hidden_size=512, num_layers=2, dropout=0.2, init_range=0.1, forget_bias=0.0,
        reverse_source=True,
    )


@register_model_architecture("noising_lstm_seq2seq", "noising_lstm_iwslt_en_de")
def noising_lstm_iwslt_en_de(args):
    base_architecture(args)


@register_model_architecture("noising_lstm_seq2seq", "noising_lstm_seq2seq_tiny")
def noising_lstm_seq2seq_tiny(args):
    _set_defaults(args, hidden_size=16, num_layers=2, dropout=0.0)
    base_architecture(args)
