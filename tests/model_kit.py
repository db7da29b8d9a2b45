"""What the tests of the paper's two models share (tests/test_models_lm.py,
tests/test_models_seq2seq.py): models built as fairseq builds them on small dictionaries, fairseq's
parsing of a command line, and plain PyTorch written out as the oracle: ``nn.LSTMCell`` copies of
a fused ``nn.LSTM``, the documented initialisation, and the parameter count of an LSTM stack."""

import argparse

import torch
import torch.nn as nn
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import build_model

import fairseq_noising.models  # noqa: F401  (registers the models)
from fairseq_noising.models.noising_lstm_lm import NoisingLSTMLanguageModel
from fairseq_noising.models.noising_lstm_seq2seq import NoisingLSTMSeq2SeqModel


def make_dictionary(n_words=30):
    """``w0 .. w{n-1}`` after fairseq's 4 special symbols."""
    d = Dictionary()
    for i in range(n_words):
        d.add_symbol(f"w{i}")
    d.finalize(padding_factor=1)
    return d


class DummyTask:
    def __init__(self, src_dict, tgt_dict=None):
        self.source_dictionary = src_dict
        self.target_dictionary = tgt_dict if tgt_dict is not None else src_dict
        self.dictionary = src_dict


def build_lm(arch="noising_lstm_lm_small", dictionary=None, **overrides):
    dictionary = dictionary or make_dictionary()
    args = argparse.Namespace(arch=arch, **overrides)
    model = build_model(args, DummyTask(dictionary))
    assert isinstance(model, NoisingLSTMLanguageModel)
    return model, dictionary


def build_s2s(arch="noising_lstm_seq2seq_tiny", src_dict=None, tgt_dict=None, **overrides):
    src_dict = src_dict or make_dictionary(25)
    tgt_dict = tgt_dict or make_dictionary(35)
    args = argparse.Namespace(arch=arch, **overrides)
    model = build_model(args, DummyTask(src_dict, tgt_dict))
    assert isinstance(model, NoisingLSTMSeq2SeqModel)
    return model, src_dict, tgt_dict


def parse_train_args(argv):
    """fairseq-train's parsing of ``argv`` (an argparse Namespace)."""
    return options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])


def random_tokens(dictionary, bsz, length, generator=None):
    return torch.randint(dictionary.nspecial, len(dictionary), (bsz, length), generator=generator)


def lstm_cells_from(lstm: nn.LSTM):
    """LSTMCell copies of the weights of every layer of a (unidirectional) nn.LSTM."""
    cells = []
    for layer in range(lstm.num_layers):
        with torch.random.fork_rng(devices=[]):  # keep the global RNG stream untouched
            cell = nn.LSTMCell(getattr(lstm, f"weight_ih_l{layer}").size(1), lstm.hidden_size)
        with torch.no_grad():
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, name).copy_(getattr(lstm, f"{name}_l{layer}"))
        cells.append(cell)
    return cells


def lstm_keys(prefix, layers):
    """The state-dict keys of ``prefix.lstm``, an nn.LSTM of ``layers`` layers, in order."""
    return [
        f"{prefix}.lstm.{name}_l{k}"
        for k in range(layers)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ]


def lstm_parameter_count(input_size, hidden, layers):
    """An LSTM layer: four gates, each a weight on the input and one on the previous h, and two
    biases (PyTorch's bias_ih and bias_hh); the layers above the first read h."""
    count = 0
    for layer in range(layers):
        count += 4 * hidden * ((input_size if layer == 0 else hidden) + hidden) + 2 * 4 * hidden
    return count


def plain_init_(init_range, forget_bias, embedding, lstm, *others):
    """The documented initialisation, written out: U(-R, R) for the LSTM, + forget_bias on the
    forget-gate slice of bias_ih, U(-R, R) for the other layers, the embedding last, pad row 0."""
    hid = lstm.hidden_size
    with torch.no_grad():
        for param in lstm.parameters():
            param.uniform_(-init_range, init_range)
        for layer in range(lstm.num_layers):
            getattr(lstm, f"bias_ih_l{layer}")[hid : 2 * hid] += forget_bias
        for module in others + (embedding,):
            for param in module.parameters():
                param.uniform_(-init_range, init_range)
        embedding.weight[embedding.padding_idx] = 0


def plain_stack(dictionary, hidden, layers, dropout, input_size=None):
    embedding = nn.Embedding(len(dictionary), hidden, padding_idx=dictionary.pad())
    lstm = nn.LSTM(
        input_size or hidden, hidden, num_layers=layers, dropout=dropout if layers > 1 else 0.0
    )
    return embedding, lstm


def plain_state(prefix, embedding, lstm, **others):
    state = {f"{prefix}.embed_tokens.weight": embedding.weight}
    state.update({f"{prefix}.lstm.{name}": p for name, p in lstm.named_parameters()})
    for name, module in others.items():
        state.update({f"{prefix}.{name}.{k}": p for k, p in module.named_parameters()})
    return state


def assert_same_state(model, expected):
    got = model.state_dict()
    assert list(got) == list(expected)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key
