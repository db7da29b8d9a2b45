"""The paper's encoder-decoder, ``noising_lstm_seq2seq`` (Luong et al., 2015; docs/models.md).

Oracles: the documented equations computed one unpadded sentence at a time with ``nn.LSTMCell``
stacks (global dot attention, input feeding, dropout where docs/models.md puts it), hand-made
token rows for source reversal, plain PyTorch modules created and initialised in the documented
order, the parameter count of the architectures' sizes, and fairseq's own SequenceGenerator.
CPU only, small sizes.
"""

import copy

import pytest
import torch
import torch.nn as nn
from conftest import mt_train_argv
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import MODEL_DATACLASS_REGISTRY, build_model
from fairseq.sequence_generator import SequenceGenerator
from model_kit import (
    DummyTask,
    assert_same_state,
    build_s2s,
    lstm_cells_from,
    lstm_keys,
    lstm_parameter_count,
    make_dictionary,
    parse_train_args,
    plain_init_,
    plain_stack,
    plain_state,
    random_tokens,
)
from omegaconf import OmegaConf

from fairseq_noising.models.noising_lstm_seq2seq import (
    NoisingLSTMSeq2SeqConfig,
    NoisingLSTMSeq2SeqModel,
)
from fairseq_noising.models.source_order import reading_order, reverse_source_tokens


def left_padded_batch(src_dict, lengths, generator=None):
    """Rows ``w_1 .. w_n </s>`` left-padded like fairseq's LanguagePairDataset."""
    srclen = max(lengths) + 1
    rows = []
    for n in lengths:
        words = torch.randint(src_dict.nspecial, len(src_dict), (n,), generator=generator)
        row = torch.cat(
            [torch.full((srclen - n - 1,), src_dict.pad()), words, torch.tensor([src_dict.eos()])]
        )
        rows.append(row)
    src = torch.stack(rows)
    return src, torch.tensor([n + 1 for n in lengths])


def parse_s2s_args(arch, flags=""):
    """fairseq-train's parsing of conftest's translation command line with ``--task translation
    --arch ARCH FLAGS``."""
    argv = mt_train_argv("data-bin", *flags.split(), task="translation", model=("--arch", arch))
    return parse_train_args(argv)


def test_s2s_architectures_and_cli_flags():
    def parse(flags=""):
        return parse_s2s_args("noising_lstm_iwslt_en_de", flags)

    args = parse()
    expected = (512, 2, 0.2, True)
    assert (args.hidden_size, args.num_layers, args.dropout, args.reverse_source) == expected
    args = parse("--no-reverse-source --hidden-size 32 --dropout 0.1")
    assert (args.hidden_size, args.dropout, args.reverse_source) == (32, 0.1, False)
    assert parse("--reverse-source").reverse_source is True


S2S_OPTIONS = "hidden_size num_layers dropout init_range forget_bias reverse_source".split()


@pytest.mark.parametrize(
    "arch,defaults",
    [
        ("noising_lstm_seq2seq", (512, 2, 0.2, 0.1, 0.0, True)),
        ("noising_lstm_iwslt_en_de", (512, 2, 0.2, 0.1, 0.0, True)),
        ("noising_lstm_seq2seq_tiny", (16, 2, 0.0, 0.1, 0.0, True)),
    ],
)
def test_s2s_dataclass_config_from_the_command_line(arch, defaults):
    """The encoder-decoder is configured by a dataclass; the model config fairseq-train builds
    from the flags has each architecture's values, and every flag reaches it."""
    assert MODEL_DATACLASS_REGISTRY["noising_lstm_seq2seq"] is NoisingLSTMSeq2SeqConfig

    def model_cfg(flags=""):
        cfg = convert_namespace_to_omegaconf(parse_s2s_args(arch, flags))
        return tuple(cfg.model[name] for name in S2S_OPTIONS)

    assert model_cfg() == defaults
    flags = "--hidden-size 32 --num-layers 3 --dropout 0.1 --init-range 0.05 --forget-bias 1.0"
    assert model_cfg(flags + " --reverse-source --no-reverse-source") == (
        32,
        3,
        0.1,
        0.05,
        1.0,
        False,
    )


def test_s2s_builds_from_its_dataclass_config():
    """What fairseq-hydra-train passes: the model's config (a DictConfig), not a Namespace."""
    cfg = NoisingLSTMSeq2SeqConfig(hidden_size=8, num_layers=1, reverse_source=False)
    cfg._name = "noising_lstm_seq2seq"
    model = build_model(
        OmegaConf.structured(cfg), DummyTask(make_dictionary(5), make_dictionary(6))
    )
    assert isinstance(model, NoisingLSTMSeq2SeqModel)
    assert model.encoder.reverse_source is False and model.encoder.lstm.num_layers == 1
    assert model.decoder.lstm.hidden_size == 8 and model.decoder.lstm.dropout == 0.0
    assert model.decoder.dropout_out.p == 0.2  # the dataclass default


def test_forget_bias_defaults_to_none_and_the_flag_sets_it():
    s2s, _, _ = build_s2s(hidden_size=6)  # Luong et al.'s init: no forget-gate offset
    for lstm in (s2s.encoder.lstm, s2s.decoder.lstm):
        assert max(p.abs().max() for p in lstm.parameters()) <= 0.1
    s2s, _, _ = build_s2s(hidden_size=6, forget_bias=1.0)
    assert s2s.encoder.lstm.bias_ih_l0[6:12].min() >= 0.9
    assert s2s.decoder.lstm.bias_ih_l1[6:12].min() >= 0.9


def test_s2s_shapes_init_and_structure():
    model, sd, td = build_s2s(hidden_size=12, dropout=0.2)
    assert isinstance(model.encoder.lstm, nn.LSTM) and model.encoder.lstm.num_layers == 2
    assert isinstance(model.decoder.lstm, nn.LSTM) and model.decoder.lstm.num_layers == 2
    assert model.decoder.lstm.input_size == 2 * 12  # input feeding
    assert model.encoder.lstm.dropout == model.decoder.lstm.dropout == 0.2
    assert model.decoder.attn_combine.bias is None  # h~ = tanh(W_c [c; h])
    for name, param in model.named_parameters():
        assert param.abs().max() <= 0.1, name
        assert param.abs().max() > 0.05, name
    src, lengths = left_padded_batch(sd, [5, 3, 7])
    prev = random_tokens(td, 3, 6)
    logits, extra = model(src, lengths, prev)
    assert logits.shape == (3, 6, len(td))
    assert extra["attn"][0].shape == (3, 6, src.size(1))
    assert model.max_positions() == (1_000_000, 1_000_000)


def test_s2s_attention_sums_to_one_and_ignores_pads():
    torch.manual_seed(0)
    model, sd, td = build_s2s(hidden_size=12, init_range=0.5)  # peaky attention
    model.eval()
    src, lengths = left_padded_batch(sd, [6, 2, 4, 8])
    prev = random_tokens(td, 4, 5)
    with torch.no_grad():
        _, extra = model(src, lengths, prev)
    attn = extra["attn"][0]
    pad = src.eq(sd.pad()).unsqueeze(1).expand_as(attn)
    assert torch.all(attn[pad] == 0)
    assert torch.allclose(attn.sum(-1), torch.ones(4, 5), atol=1e-5)
    assert torch.all(attn[~pad] > 0)
    # padding the batch further on the left changes nothing
    extra_pad = torch.cat([torch.full((4, 3), sd.pad()), src], dim=1)
    with torch.no_grad():
        logits2, extra2 = model(extra_pad, lengths, prev)
        logits, _ = model(src, lengths, prev)
    assert torch.allclose(logits2, logits, atol=1e-5)
    assert torch.allclose(extra2["attn"][0][:, :, 3:], attn, atol=1e-6)


def test_reverse_source_token_helpers():
    pad, eos = 1, 2
    left = torch.tensor(
        [[1, 1, 5, 6, 7, 2], [5, 6, 7, 8, 9, 2], [1, 1, 1, 1, 5, 2], [1, 1, 1, 1, 1, 2]]
    )
    assert reverse_source_tokens(left, pad, eos).tolist() == [
        [1, 1, 7, 6, 5, 2],
        [9, 8, 7, 6, 5, 2],
        [1, 1, 1, 1, 5, 2],
        [1, 1, 1, 1, 1, 2],
    ]
    right = torch.tensor([[5, 6, 7, 2, 1, 1], [5, 6, 7, 8, 1, 1]])  # second row: no eos
    assert reverse_source_tokens(right, pad, eos).tolist() == [
        [7, 6, 5, 2, 1, 1],
        [8, 7, 6, 5, 1, 1],
    ]
    order, lengths = reading_order(left, pad, eos, reverse=True)
    assert lengths.tolist() == [4, 6, 2, 1]
    for row in order:  # a permutation per row
        assert sorted(row.tolist()) == list(range(left.size(1)))
    # applying the reversal twice is the identity
    assert torch.equal(reverse_source_tokens(reverse_source_tokens(left, pad, eos), pad, eos), left)


@pytest.mark.parametrize("reverse", [True, False])
def test_s2s_encoder_reads_reversed_real_tokens(reverse):
    model, sd, td = build_s2s(reverse_source=reverse)
    assert model.encoder.reverse_source is reverse
    src, lengths = left_padded_batch(sd, [5, 2, 3])
    read = []
    handle = model.encoder.embed_tokens.register_forward_hook(
        lambda m, inp, out: read.append(inp[0].t().clone())
    )
    model.encoder(src, lengths)
    handle.remove()
    (read,) = read
    for row, got in zip(src, read):
        real = row[row.ne(sd.pad())].tolist()
        words, eos = real[:-1], real[-1:]
        expected = (words[::-1] if reverse else words) + eos
        n = len(expected)
        # what the LSTM consumes: exactly the (reversed) sentence; pads only after it (packed away)
        assert got[:n].tolist() == expected
        assert torch.all(got[n:] == sd.pad())


def test_s2s_reversal_changes_only_what_the_encoder_reads():
    torch.manual_seed(0)
    on, sd, td = build_s2s(hidden_size=12, reverse_source=True, init_range=0.5)
    off = copy.deepcopy(on)
    off.encoder.reverse_source = False
    on.eval()
    off.eval()
    src, lengths = left_padded_batch(sd, [6, 3, 4])
    rev = reverse_source_tokens(src, sd.pad(), sd.eos())
    prev = random_tokens(td, 3, 5)
    with torch.no_grad():
        lo_on, ex_on = on(src, lengths, prev)
        lo_off, ex_off = off(rev, lengths, prev)
        lo_plain, _ = off(src, lengths, prev)
    assert torch.allclose(lo_on, lo_off, atol=1e-6)
    assert (lo_on - lo_plain).abs().max() > 1e-2  # the reading order matters
    # the attention follows the tokens: position j of s <-> its position in reversed s
    order_on, _ = reading_order(src, sd.pad(), sd.eos(), reverse=True)
    order_off, _ = reading_order(rev, sd.pad(), sd.eos(), reverse=False)
    for b in range(src.size(0)):
        for j in range(src.size(1)):
            if src[b, j] == sd.pad():
                continue
            j_rev = (order_off[b] == order_on[b, j]).nonzero().item()
            assert rev[b, j_rev] == src[b, j]
            assert torch.allclose(
                ex_on["attn"][0][b, :, j], ex_off["attn"][0][b, :, j_rev], atol=1e-6
            )


DROPOUTS = (
    "encoder.dropout_in",
    "encoder.dropout_out",
    "decoder.dropout_in",
    "decoder.dropout_out",
)


def reference_s2s_row(model, src_row, prev_row, masks=None):
    """Luong et al. (2015) equations, one unpadded sentence, LSTMCell stacks, no batching.
    ``masks``: what each of the DROPOUTS multiplies by, a mask over the hidden units applied
    where docs/models.md says (the LSTM's own dropout between its layers is not one of them)."""
    enc, dec = model.encoder, model.decoder
    enc_in, enc_out, dec_in, dec_out = ((masks or {}).get(name, 1.0) for name in DROPOUTS)
    pad, eos = enc.padding_idx, enc.eos_idx
    real = src_row[src_row.ne(pad)]
    words, last = (real[:-1], real[-1:]) if real[-1] == eos else (real, real[:0])
    read = torch.cat([words.flip(0) if enc.reverse_source else words, last])
    enc_cells, dec_cells = lstm_cells_from(enc.lstm), lstm_cells_from(dec.lstm)
    hid = enc.hidden_size
    h = [torch.zeros(1, hid) for _ in enc_cells]
    c = [torch.zeros(1, hid) for _ in enc_cells]
    tops = []
    for tok in read:
        inp = enc.embed_tokens(tok.view(1)) * enc_in
        for layer, cell in enumerate(enc_cells):
            h[layer], c[layer] = cell(inp, (h[layer], c[layer]))
            inp = h[layer]
        tops.append(inp[0] * enc_out)  # the memory: dropped outputs; the final state is not
    # back to the order of the source sentence
    if enc.reverse_source:
        tops = tops[: len(words)][::-1] + tops[len(words) :]
    memory = torch.stack(tops)  # (n, H)
    feed = torch.zeros(1, hid)
    logits, attns = [], []
    for tok in prev_row:
        inp = torch.cat([dec.embed_tokens(tok.view(1)) * dec_in, feed], dim=1)
        for layer, cell in enumerate(dec_cells):
            h[layer], c[layer] = cell(inp, (h[layer], c[layer]))
            inp = h[layer]
        top = inp[0]  # enters the attention undropped
        a = torch.softmax(memory @ top, dim=0)  # dot score
        context = a @ memory
        h_tilde = torch.tanh(dec.attn_combine.weight @ torch.cat([context, top])) * dec_out
        logits.append(dec.output_projection.weight @ h_tilde + dec.output_projection.bias)
        attns.append(a)
        feed = h_tilde.view(1, -1)
    return torch.stack(logits), torch.stack(attns)


@pytest.mark.parametrize("reverse", [True, False])
def test_s2s_matches_luong_reference(reverse):
    torch.manual_seed(0)
    model, sd, td = build_s2s(
        hidden_size=10, num_layers=2, dropout=0.3, reverse_source=reverse, init_range=0.3
    )
    model.eval()
    src, lengths = left_padded_batch(sd, [5, 1, 3])
    prev = random_tokens(td, 3, 4)
    with torch.no_grad():
        logits, extra = model(src, lengths, prev)
        for b in range(3):
            ref_logits, ref_attn = reference_s2s_row(model, src[b], prev[b])
            assert torch.allclose(logits[b], ref_logits, atol=1e-5)
            real = src[b].ne(sd.pad())
            assert torch.allclose(extra["attn"][0][b][:, real], ref_attn, atol=1e-5)


class FixedMask(nn.Module):
    """In place of a dropout module: multiplies by a fixed mask over the hidden units."""

    def __init__(self, mask):
        super().__init__()
        self.mask = mask

    def forward(self, x):
        return x * self.mask


def test_s2s_dropout_acts_where_the_equations_say():
    """Each dropout module replaced by a fixed mask (0 or 2 per hidden unit, another mask for each
    one): the model computes the equations of docs/models.md with those masks, i.e. the dropped
    embeddings enter the LSTMs, the dropped encoder outputs are the attention's memory, h_t enters
    the attention undropped, and the dropped h~_t feeds both the softmax layer and the next step."""
    torch.manual_seed(0)
    model, sd, td = build_s2s(hidden_size=10, num_layers=2, init_range=0.3)
    assert model.encoder.lstm.dropout == model.decoder.lstm.dropout == 0.0  # (tiny: dropout 0)
    g = torch.Generator().manual_seed(1)
    masks = {name: torch.bernoulli(torch.full((10,), 0.5), generator=g) * 2 for name in DROPOUTS}
    for name, mask in masks.items():
        side, module = name.split(".")
        setattr(getattr(model, side), module, FixedMask(mask))
    model.train()
    src, lengths = left_padded_batch(sd, [5, 1, 3])
    prev = random_tokens(td, 3, 4)
    with torch.no_grad():
        logits, extra = model(src, lengths, prev)
        for b in range(3):
            ref_logits, ref_attn = reference_s2s_row(model, src[b], prev[b], masks)
            assert torch.allclose(logits[b], ref_logits, atol=1e-5), b
            real = src[b].ne(sd.pad())
            assert torch.allclose(extra["attn"][0][b][:, real], ref_attn, atol=1e-5), b
            plain, _ = reference_s2s_row(model, src[b], prev[b])
            assert not torch.allclose(ref_logits, plain, atol=1e-3)  # the masks matter


def test_s2s_dropout_train_vs_eval():
    model, sd, td = build_s2s(hidden_size=12, dropout=0.2)
    src, lengths = left_padded_batch(sd, [4, 6])
    prev = random_tokens(td, 2, 5)
    calls = []
    for name, mod in [
        ("enc_in", model.encoder.dropout_in),
        ("enc_out", model.encoder.dropout_out),
        ("dec_in", model.decoder.dropout_in),
        ("dec_out", model.decoder.dropout_out),
    ]:
        assert mod.p == 0.2
        mod.register_forward_hook(
            lambda m, i, o, name=name: calls.append((name, torch.equal(i[0], o)))
        )
    model.train()
    assert not torch.equal(model(src, lengths, prev)[0], model(src, lengths, prev)[0])
    assert {n for n, _ in calls} == {"enc_in", "enc_out", "dec_in", "dec_out"}
    assert not any(same for _, same in calls)  # each one dropped something in train mode
    assert sum(n == "dec_out" for n, _ in calls) == 2 * 5  # once per target step (h~_t)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(src, lengths, prev)[0], model(src, lengths, prev)[0])


def test_s2s_incremental_decoding_and_reordering():
    torch.manual_seed(0)
    model, sd, td = build_s2s(hidden_size=12, dropout=0.2, init_range=0.3)
    model.eval()
    src, lengths = left_padded_batch(sd, [5, 2, 7, 4])
    prev = random_tokens(td, 4, 6)
    with torch.no_grad():
        full, full_extra = model(src, lengths, prev)
        enc_out = model.encoder(src, lengths)
        inc = {}
        steps = [model.decoder(prev[:, : t + 1], enc_out, incremental_state=inc) for t in range(6)]
        assert torch.allclose(torch.cat([s[0] for s in steps], dim=1), full, atol=1e-5)
        assert torch.allclose(
            torch.cat([s[1]["attn"][0] for s in steps], dim=1), full_extra["attn"][0], atol=1e-5
        )

        order = torch.tensor([2, 2, 0, 3])
        inc = {}
        outs = [
            model.decoder(prev[:, : t + 1], enc_out, incremental_state=inc)[0] for t in range(3)
        ]
        enc_out = model.encoder.reorder_encoder_out(enc_out, order)
        model.decoder.reorder_incremental_state_scripting(inc, order)
        prev_r = prev[order]
        outs = [o[order] for o in outs]
        outs += [
            model.decoder(prev_r[:, : t + 1], enc_out, incremental_state=inc)[0]
            for t in range(3, 6)
        ]
        expected, _ = model(src[order], lengths[order], prev_r)
        assert torch.allclose(torch.cat(outs, dim=1), expected, atol=1e-5)


@pytest.mark.parametrize("beam", [1, 3])
def test_s2s_sequence_generator_scores_match_full_forward(beam):
    torch.manual_seed(0)
    model, sd, td = build_s2s(hidden_size=12, init_range=0.3)
    model.eval()
    src, lengths = left_padded_batch(sd, [5, 3, 6])
    generator = SequenceGenerator([model], td, beam_size=beam, max_len_a=0, max_len_b=6)
    with torch.no_grad():
        hypos = generator.generate(
            [model], {"net_input": {"src_tokens": src, "src_lengths": lengths}}
        )
        for b in range(3):
            hypo = hypos[b][0]
            tokens = hypo["tokens"]
            prev = torch.cat([torch.tensor([td.eos()]), tokens[:-1]]).unsqueeze(0)
            logits, extra = model(src[b : b + 1], lengths[b : b + 1], prev)
            lprobs = torch.log_softmax(logits[0], dim=-1)
            scores = lprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)
            assert torch.allclose(scores, hypo["positional_scores"], atol=1e-4)
            assert hypo["attention"].shape[1] == len(tokens)


# ---------------------------------------------------------------- checkpoints and seeded draws
# the state-dict keys, in order, that checkpoints hold (those of earlier versions must still load)
S2S_KEYS = [
    "encoder.embed_tokens.weight",
    *lstm_keys("encoder", 2),
    "decoder.embed_tokens.weight",
    *lstm_keys("decoder", 2),
    "decoder.attn_combine.weight",
    "decoder.output_projection.weight",
    "decoder.output_projection.bias",
]


@pytest.mark.parametrize(
    "arch, hidden", [("noising_lstm_iwslt_en_de", 512), ("noising_lstm_seq2seq_tiny", 16)]
)
def test_state_dict_keys_and_parameter_count(arch, hidden):
    """Two layers of ``hidden`` units each side (docs/models.md), 25 source and 35 target words
    after fairseq's 4 specials: the source embedding and the encoder's LSTM; the target
    embedding, the decoder's LSTM (its first layer reads [embedding ; h~], 2H), W_c (2H -> H, no
    bias), W_s and b_s. For the tiny model: 464 + 4,352 + 624 + 5,376 + 512 + 663 = 11,991."""
    model, sd, td = build_s2s(arch)
    assert list(model.state_dict()) == S2S_KEYS
    src_vocab, tgt_vocab = len(sd), len(td)
    assert (src_vocab, tgt_vocab) == (29, 39)
    expected = (
        src_vocab * hidden
        + lstm_parameter_count(hidden, hidden, 2)
        + tgt_vocab * hidden
        + lstm_parameter_count(2 * hidden, hidden, 2)
        + 2 * hidden * hidden
        + hidden * tgt_vocab
        + tgt_vocab
    )
    assert sum(p.numel() for p in model.parameters()) == expected


@pytest.mark.parametrize(
    "options",
    [
        dict(hidden_size=6, num_layers=2, dropout=0.0, init_range=0.1, forget_bias=0.0),
        dict(hidden_size=5, num_layers=3, dropout=0.3, init_range=0.2, forget_bias=1.0),
    ],
)
def test_s2s_seeded_parameters_equal_a_plain_pytorch_construction(options):
    hid, layers, dropout, init_range, forget_bias = options.values()
    torch.manual_seed(5)
    model, sd, td = build_s2s(**options)
    torch.manual_seed(5)
    enc_embedding, enc_lstm = plain_stack(sd, hid, layers, dropout)
    plain_init_(init_range, forget_bias, enc_embedding, enc_lstm)
    dec_embedding, dec_lstm = plain_stack(td, hid, layers, dropout, input_size=2 * hid)
    attn_combine = nn.Linear(2 * hid, hid, bias=False)
    projection = nn.Linear(hid, len(td))
    plain_init_(init_range, forget_bias, dec_embedding, dec_lstm, attn_combine, projection)
    expected = plain_state("encoder", enc_embedding, enc_lstm)
    expected.update(
        plain_state(
            "decoder",
            dec_embedding,
            dec_lstm,
            attn_combine=attn_combine,
            output_projection=projection,
        )
    )
    assert_same_state(model, expected)
