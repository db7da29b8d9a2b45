"""LSTM encoder-decoder with Luong et al. (2015) global dot attention and input feeding, the
translation model of Section 4.2 of the paper (IWSLT'15 En-De).

Fairseq model ``noising_lstm_seq2seq`` (config :class:`NoisingLSTMSeq2SeqConfig`), architectures
``noising_lstm_iwslt_en_de`` (the paper's) and ``noising_lstm_seq2seq_tiny`` (tests). Options,
equations, source reversal and interfaces: ``docs/models.md``.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    register_model,
)
from torch import Tensor

from .lstm_layers import (
    IncrementalState,
    LSTMDecoderBase,
    LSTMStack,
    LSTMStackConfig,
    option,
    register_sizes,
    set_defaults,
)
from .source_order import reading_order, reverse_source_tokens  # noqa: F401  (re-exported)


@dataclass
class NoisingLSTMSeq2SeqConfig(LSTMStackConfig):
    num_layers: int = option(2, "stacked LSTM layers in the encoder and in the decoder")
    dropout: float = option(
        0.2,
        "dropout on embeddings, between LSTM layers, on encoder outputs and on the attentional "
        "hidden state",
    )
    forget_bias: float = option(
        0.0,
        "added to every LSTM layer's forget-gate bias after initialisation "
        "(default 0: Luong et al.'s uniform init)",
    )
    # on the command line the pair --reverse-source / --no-reverse-source (see add_args)
    reverse_source: bool = option(True, "read the source sentence backwards (default)")


class NoisingLSTMEncoder(LSTMStack, FairseqEncoder):
    """Embedding -> dropout -> fused nn.LSTM over the packed source in reading order -> dropout;
    the outputs are returned at the position of their token. ``cfg``: the model's options."""

    def __init__(self, cfg, dictionary):
        super().__init__(dictionary)
        self.reverse_source = cfg.reverse_source
        self.eos_idx = dictionary.eos()
        self.build_lstm_stack(cfg, dictionary)
        self.init_parameters_(cfg)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **unused):
        srclen = src_tokens.size(1)
        order, lengths = reading_order(
            src_tokens, self.padding_idx, self.eos_idx, reverse=self.reverse_source
        )
        # tokens in reading order, right-padded: read[b, order[b, j]] = src[b, j]
        read_tokens = torch.empty_like(src_tokens).scatter_(1, order, src_tokens)
        x = self.embed(read_tokens)  # (S, B, H)
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
        batch_dim = {"encoder_out": 1, "encoder_final_h": 1, "encoder_final_c": 1}
        return {
            key: [t.index_select(batch_dim.get(key, 0), new_order) for t in tensors]
            for key, tensors in encoder_out.items()
        }


class NoisingLSTMAttentionDecoder(LSTMDecoderBase):
    """Input-feeding LSTM decoder with global dot attention (docs/models.md, "Equations").
    ``cfg``: the model's options."""

    cache_batch_dims = {"h": 1, "c": 1, "input_feed": 0}

    def __init__(self, cfg, dictionary):
        super().__init__(dictionary)
        self.need_attn = True
        # input feeding: the first layer reads [embedding ; h~_{t-1}]
        self.build_lstm_stack(cfg, dictionary, input_size=2 * cfg.hidden_size)
        self.attn_combine = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)  # W_c
        self.build_output_projection(dictionary)  # W_s, b_s
        self.init_parameters_(cfg, self.attn_combine, self.output_projection)

    def extract_features(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[IncrementalState] = None,
        **unused,
    ):
        assert encoder_out is not None, "the attention decoder needs encoder_out"
        enc = encoder_out["encoder_out"][0].transpose(0, 1)  # (B, S, H)
        # additive mask: -inf on pads -> exactly zero weight after the softmax
        score_mask = encoder_out["encoder_padding_mask"][0].unsqueeze(1)  # (B, 1, S)

        prev_output_tokens, cached = self.read_cache(prev_output_tokens, incremental_state)
        if cached is not None:
            h, c, input_feed = cached["h"], cached["c"], cached["input_feed"]
        else:
            h = encoder_out["encoder_final_h"][0]
            c = encoder_out["encoder_final_c"][0]
            input_feed = enc.new_zeros(enc.size(0), self.hidden_size)

        emb = self.embed(prev_output_tokens)  # (T, B, H)
        outs = []
        attns = []
        for t in range(prev_output_tokens.size(1)):
            step_in = torch.cat((emb[t], input_feed), dim=1).unsqueeze(0)  # (1, B, 2H)
            top, (h, c) = self.lstm(step_in, (h, c))
            top = top[0]  # (B, H), undropped top-layer h_t
            scores = torch.bmm(top.unsqueeze(1), enc.transpose(1, 2))  # (B, 1, S)
            scores = scores.float().masked_fill(score_mask, float("-inf"))
            attn = F.softmax(scores, dim=-1).type_as(top)  # (B, 1, S)
            context = torch.bmm(attn, enc).squeeze(1)  # (B, H)
            attn_h = torch.tanh(self.attn_combine(torch.cat((context, top), dim=1)))
            input_feed = self.dropout_out(attn_h)
            outs.append(input_feed)
            attns.append(attn.squeeze(1))

        x = torch.stack(outs, dim=1)  # (B, T, H)
        attn_all = torch.stack(attns, dim=1)  # (B, T, S)
        self.write_cache(incremental_state, h=h, c=c, input_feed=input_feed)
        return x, {"attn": [attn_all], "inner_states": [x], "final_state": (h, c)}

    def make_generation_fast_(self, need_attn=False, **kwargs):
        self.need_attn = need_attn


@register_model("noising_lstm_seq2seq", dataclass=NoisingLSTMSeq2SeqConfig)
class NoisingLSTMSeq2SeqModel(FairseqEncoderDecoderModel):
    """Luong et al. (2015) attention encoder-decoder; see docs/models.md."""

    config_class = NoisingLSTMSeq2SeqConfig  # each size's subclass has its own (register_sizes)

    @classmethod
    def add_args(cls, parser):
        # A bool field defaulting to True would become a store_false --reverse-source: define the
        # pair first; fairseq's generator then skips the already defined --reverse-source.
        for flag, value, help in [
            ("--reverse-source", True, "read the source sentence backwards (default)"),
            ("--no-reverse-source", False, "read the source sentence in its given order"),
        ]:
            parser.add_argument(
                flag, dest="reverse_source", action="store_const", const=value, help=help
            )
        super().add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        set_defaults(args, cls.config_class)  # options the command line or config left unset
        encoder = NoisingLSTMEncoder(args, task.source_dictionary)
        decoder = NoisingLSTMAttentionDecoder(args, task.target_dictionary)
        return cls(encoder, decoder)


# the sizes, each a model of its own (--arch or Hydra's model._name); ``noising_lstm_seq2seq`` has
# the dataclass defaults
SIZES = {
    "noising_lstm_iwslt_en_de": dict(hidden_size=512, num_layers=2, dropout=0.2),  # the paper's
    "noising_lstm_seq2seq_tiny": dict(hidden_size=16, num_layers=2, dropout=0.0),  # for tests
}
register_sizes(NoisingLSTMSeq2SeqModel, SIZES)
