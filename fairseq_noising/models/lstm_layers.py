"""The LSTM code the language model and the encoder-decoder share: options, embedding, fused
``nn.LSTM`` stack, initialisation, output projection and incremental cache.

See ``docs/models.md`` (initialisation, dropout placement, incremental decoding).
"""

import functools
from dataclasses import dataclass, field, make_dataclass
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from fairseq.dataclass import FairseqDataclass
from fairseq.models import ARCH_CONFIG_REGISTRY, FairseqIncrementalDecoder, register_model
from fairseq.modules import FairseqDropout
from fairseq.utils import safe_getattr
from torch import Tensor

DEFAULT_MAX_POSITIONS = 1_000_000  # recurrent: no positional limit

IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


def option(default, help: str):
    """A config field: its default and its ``--help`` text."""
    return field(default=default, metadata={"help": help})


@dataclass
class LSTMStackConfig(FairseqDataclass):
    """The options every LSTM stack reads; each model's config extends it (and sets defaults)."""

    hidden_size: int = option(512, "LSTM units per layer (the word embeddings have the same size)")
    num_layers: int = option(2, "number of stacked LSTM layers")
    dropout: float = option(0.0, "dropout probability")
    init_range: float = option(0.1, "initialise every weight and bias uniformly in [-R, R]")
    forget_bias: float = option(0.0, "added to every LSTM layer's forget-gate bias after init")


def set_defaults(args, config_cls):
    """Sets every option of ``config_cls`` that ``args`` leaves unset (missing or None) to its
    default."""
    for name, f in config_cls.__dataclass_fields__.items():
        if not name.startswith("_") and safe_getattr(args, name, None) is None:
            setattr(args, name, f.default)


def register_sizes(model_cls, sizes: Dict[str, dict]):
    """Registers each size of ``sizes`` (name -> option values) as a fairseq model of its own: a
    subclass of ``model_cls`` whose config is ``model_cls.config_class`` with the size's values as
    defaults. ``--arch NAME`` and Hydra's ``model._name: NAME`` then build the same model
    (fairseq runs an architecture function for argparse only: under Hydra the model's dataclass
    defaults would fill every option a config leaves out)."""
    base = model_cls.config_class
    for name, values in sizes.items():
        fields = []
        for key, value in values.items():
            parent = base.__dataclass_fields__[key]
            fields.append((key, parent.type, field(default=value, metadata=parent.metadata)))
        config = make_dataclass(f"{name}_config", fields, bases=(base,))
        size = type(model_cls.__name__, (model_cls,), {"config_class": config})
        size.__module__, size.__doc__ = model_cls.__module__, f"``{name}``: {values}"
        register_model(name, dataclass=config)(size)
        # register_model gave the size a no-op architecture function: let it fill an argparse
        # Namespace (fairseq-train --arch NAME) with the size's values, as fairseq's own do
        ARCH_CONFIG_REGISTRY[name] = functools.partial(set_defaults, config_cls=config)


def add_forget_bias_(lstm: nn.LSTM, value: float):
    """Adds ``value`` to the forget-gate slice ``bias_ih_l{k}[H:2H]`` of every layer of ``lstm``
    (PyTorch's gate order is input, forget, cell, output): TensorFlow's
    ``BasicLSTMCell(forget_bias=value)``."""
    if not value:
        return
    with torch.no_grad():
        for layer in range(lstm.num_layers):
            getattr(lstm, f"bias_ih_l{layer}")[lstm.hidden_size : 2 * lstm.hidden_size] += value


def init_uniform_(module: nn.Module, init_range: float, padding_idx: Optional[int] = None):
    """Draws every parameter of ``module`` from U(-init_range, init_range); zeroes the
    ``padding_idx`` row of an embedding."""
    with torch.no_grad():
        for param in module.parameters():
            param.uniform_(-init_range, init_range)
        if padding_idx is not None and isinstance(module, nn.Embedding):
            module.weight[padding_idx].zero_()


class LSTMStack:
    """Mixin of the encoder and the decoders: ``embed_tokens -> dropout_in -> lstm ->
    dropout_out``. The attribute names are the state-dict keys of saved checkpoints."""

    def build_lstm_stack(self, cfg, dictionary, input_size: Optional[int] = None):
        """Creates the modules from ``cfg`` (hidden_size, num_layers, dropout); the LSTM reads
        ``input_size`` features per step (default: hidden_size)."""
        self.hidden_size = cfg.hidden_size
        self.num_layers = cfg.num_layers
        self.padding_idx = dictionary.pad()
        self._max_positions = DEFAULT_MAX_POSITIONS
        self.embed_tokens = nn.Embedding(len(dictionary), cfg.hidden_size, self.padding_idx)
        self.dropout_in = FairseqDropout(cfg.dropout, module_name=type(self).__name__)
        # nn.LSTM's own dropout acts on the outputs of every layer except the last one
        self.lstm = nn.LSTM(
            input_size or cfg.hidden_size,
            cfg.hidden_size,
            num_layers=cfg.num_layers,
            dropout=cfg.dropout if cfg.num_layers > 1 else 0.0,
        )
        self.dropout_out = FairseqDropout(cfg.dropout, module_name=type(self).__name__)

    def init_parameters_(self, cfg, *modules: nn.Module):
        """Uniform init (``cfg.init_range``) of the LSTM, its forget-gate bias
        (``cfg.forget_bias``), then each of ``modules``, the embedding last. This order fixes
        the random draws, i.e. the parameters of a model built from a given seed."""
        init_uniform_(self.lstm, cfg.init_range)
        add_forget_bias_(self.lstm, cfg.forget_bias)
        for module in modules:
            init_uniform_(module, cfg.init_range)
        init_uniform_(self.embed_tokens, cfg.init_range, self.padding_idx)

    def embed(self, tokens: Tensor) -> Tensor:
        """Token ids (B, T) -> dropped embeddings (T, B, H), time-major like cuDNN's LSTM."""
        return self.dropout_in(self.embed_tokens(tokens.t()))

    def max_positions(self):
        return self._max_positions


class LSTMDecoderBase(LSTMStack, FairseqIncrementalDecoder):
    """What both decoders share besides the stack: the output projection ``W h + b`` and the
    cache of incremental decoding."""

    cache_batch_dims = {"h": 1, "c": 1}  # cached tensor -> its batch dimension

    def build_output_projection(self, dictionary):
        self.output_projection = nn.Linear(self.hidden_size, len(dictionary), bias=True)

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[IncrementalState] = None,
        features_only: bool = False,
        **kwargs,
    ):
        """``(logits (B, T, V), extra)``; with ``features_only`` the features (B, T, H) instead."""
        x, extra = self.extract_features(
            prev_output_tokens,
            encoder_out=encoder_out,
            incremental_state=incremental_state,
            **kwargs,
        )
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(features)

    def read_cache(self, prev_output_tokens: Tensor, incremental_state: Optional[IncrementalState]):
        """``(tokens, cached)``: after an earlier incremental call, its cached tensors and only the
        last column of ``prev_output_tokens``; else None and all of them."""
        cached = None
        if incremental_state is not None:
            cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        return prev_output_tokens, cached

    def write_cache(self, incremental_state: Optional[IncrementalState], **tensors: Tensor):
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "cached_state", tensors)

    def reorder_incremental_state(self, incremental_state: IncrementalState, new_order: Tensor):
        cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is None:
            return
        reordered = {
            k: v.index_select(self.cache_batch_dims[k], new_order) for k, v in cached.items()
        }
        self.set_incremental_state(incremental_state, "cached_state", reordered)
