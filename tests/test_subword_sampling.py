"""Subword sampling against an oracle that shares no code with it (tests/subword_oracle.py).

Tiny sentencepiece models (unigram and BPE) are trained here on a few synthetic lines. The
dictionary lists their pieces in another order than the model, as a fairseq dictionary may.

- Unigram, every segmentation: the sampled segmentations of a few words follow p ∝ prod
  p(piece)^alpha over all of them (chi-square, 4000 draws); the nbest best of a sentence, with
  p ∝ exp(alpha * score), likewise.
- BPE-dropout: alpha 0 is sentencepiece's own segmentation, alpha 1 the characters, and in
  between the draws follow the exact distribution of Provilkov et al.'s Algorithm 1.
- Every sample spells the same text; the segmentation is a pure function of (seed, epoch,
  example id): the same in any batch, order, process or copy, whatever else used
  sentencepiece's own generator meanwhile; another epoch or seed gives another.
"""

import pickle
import random
from collections import Counter

import numpy as np
import pytest
from subword_oracle import (
    bpe_dropout_distribution,
    chi_square,
    chi_square_critical,
    nbest_distribution,
    unigram_distribution,
    vocabulary,
)

from fairseq_noising.errors import NoisingError
from fairseq_noising.subword import SubwordModel, SubwordSampler
from fairseq_noising.subword.model import BPE, CONTROL, UNIGRAM, UNKNOWN

SYLLABLES = "ka ri to mu se la po ne di vo".split()  # words of 1-3 syllables: pieces inside words
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's, ids 0-3
EOS, UNK = 2, 3
DRAWS = 4000


def corpus(lines=600, seed=0):
    rng = random.Random(seed)

    def word():  # the first 4 syllables more often
        return "".join(
            rng.choice(SYLLABLES[: rng.choice([4, 10])]) for _ in range(rng.randint(1, 3))
        )

    return [" ".join(word() for _ in range(rng.randint(3, 8))) for _ in range(lines)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{"unigram"|"bpe": (model path, sentencepiece processor, the dictionary's symbols)}."""
    import sentencepiece as spm

    folder = tmp_path_factory.mktemp("spm")
    text = folder / "corpus.txt"
    text.write_text("\n".join(corpus()) + "\n", encoding="utf-8")
    out = {}
    for kind in ("unigram", "bpe"):
        spm.SentencePieceTrainer.train(
            input=str(text),
            model_prefix=str(folder / kind),
            vocab_size=60,
            model_type=kind,
            hard_vocab_limit=False,
            character_coverage=1.0,
            minloglevel=2,
        )
        sp = spm.SentencePieceProcessor(model_file=str(folder / f"{kind}.model"))
        pieces = list(vocabulary(sp))
        random.Random(1).shuffle(pieces)  # not the model's order
        out[kind] = (str(folder / f"{kind}.model"), sp, SPECIALS + pieces + ["<blank>"])
    return out


def sampler_of(models, kind, alpha, nbest=-1, seed=1):
    path, _, symbols = models[kind]
    model = SubwordModel(path)
    tables = model.map_dictionary(symbols, [0, 1, 2, 3, len(symbols) - 1], UNK, "dict.txt")
    return SubwordSampler(model, *tables, alpha=alpha, nbest=nbest, seed=seed)


def ids_of(models, kind, text):
    """``text`` as sentencepiece segments it, in the dictionary's ids, then ``</s>``."""
    _, sp, symbols = models[kind]
    index = {s: i for i, s in enumerate(symbols)}
    return np.array([index[p] for p in sp.encode(text, out_type=str)] + [EOS])


def pieces_of(models, kind, ids):
    return tuple(models[kind][2][i] for i in ids)


def draw_many(models, kind, sampler, text, draws=DRAWS, epoch=1):
    """Counter of the segmentations (piece strings, less </s>) of ``text`` over ``draws``
    examples (ids 0 .. draws - 1)."""
    ids = ids_of(models, kind, text)
    out = sampler([ids] * draws, np.arange(draws), epoch)
    assert all(o[-1] == EOS for o in out)
    return Counter(pieces_of(models, kind, o[:-1]) for o in out)


def assert_follows(counts, distribution, what):
    statistic, df = chi_square(counts, distribution, sum(counts.values()))
    assert statistic < chi_square_critical(df), f"{what}: chi2={statistic:.1f} with {df} dof"


# --- unigram ---------------------------------------------------------------------------------


@pytest.mark.parametrize("word", ["karito", "kakari", "toka"])
@pytest.mark.parametrize("alpha", [0.2, 0.5])
def test_unigram_sampling_follows_every_segmentations_probability(models, word, alpha):
    _, sp, _ = models["unigram"]
    distribution = unigram_distribution("▁" + word, vocabulary(sp), alpha)
    assert len(distribution) > 5  # a real choice
    counts = draw_many(models, "unigram", sampler_of(models, "unigram", alpha), word)
    assert_follows(counts, distribution, f"{word}, alpha {alpha}")


def test_unigram_sampling_of_a_sentence_is_its_words_sampled_alone(models):
    """The lattice of a sentence factorises at each word: the words of one sentence are
    independent draws from each word's own distribution."""
    _, sp, _ = models["unigram"]
    counts = draw_many(models, "unigram", sampler_of(models, "unigram", 0.3), "karito ladi")
    for index, word in enumerate(["▁karito", "▁ladi"]):
        marginal = Counter()
        for pieces, n in counts.items():
            starts = [i for i, p in enumerate(pieces) if p.startswith("▁")] + [len(pieces)]
            assert len(starts) == 3  # two words, each starting with its ▁ piece
            marginal[pieces[starts[index] : starts[index + 1]]] += n
        distribution = unigram_distribution(word, vocabulary(sp), 0.3)
        assert_follows(marginal, distribution, word)


@pytest.mark.parametrize("nbest, alpha", [(4, 0.5), (12, 0.2)])
@pytest.mark.parametrize("listed", [False, True], ids=["met-in-training", "listed-before"])
def test_nbest_sampling_follows_the_sentences_nbest(models, nbest, alpha, listed):
    _, sp, _ = models["unigram"]
    distribution = nbest_distribution(["▁karito", "▁ladi"], vocabulary(sp), alpha, nbest)
    sampler = sampler_of(models, "unigram", alpha, nbest)
    if listed:  # the n best of the split's sentences listed once, before training
        ids = ids_of(models, "unigram", "karito ladi")
        assert sampler.prepare(np.r_[ids, ids_of(models, "unigram", "mu se")], [len(ids), 3]) == 2
    counts = draw_many(models, "unigram", sampler, "karito ladi")
    assert_follows(counts, distribution, f"{nbest}-best, alpha {alpha}")


# --- BPE-dropout ------------------------------------------------------------------------------


def test_bpe_dropout_at_0_is_sentencepieces_segmentation_and_at_1_the_characters(models):
    _, sp, _ = models["bpe"]
    lines = corpus(100, seed=5) + ["karitomusekakari vodivo sesese"]  # unseen words too
    batch = [ids_of(models, "bpe", line) for line in lines]
    ids = np.arange(len(lines))
    for got, line in zip(sampler_of(models, "bpe", 0.0)(batch, ids, 3), lines):
        assert pieces_of(models, "bpe", got[:-1]) == tuple(sp.encode(line, out_type=str))
    for got, line in zip(sampler_of(models, "bpe", 1.0)(batch, ids, 3), lines):
        chars = [c for w in line.split() for c in "▁" + w]
        assert list(pieces_of(models, "bpe", got[:-1])) == chars


@pytest.mark.parametrize("word", ["karito", "muse", "kakari"])
@pytest.mark.parametrize("alpha", [0.1, 0.4])
def test_bpe_dropout_follows_algorithm_1(models, word, alpha):
    _, sp, _ = models["bpe"]
    distribution = bpe_dropout_distribution("▁" + word, vocabulary(sp), alpha)
    assert len(distribution) > 3
    counts = draw_many(models, "bpe", sampler_of(models, "bpe", alpha), word)
    assert_follows(counts, distribution, f"{word}, p {alpha}")


# --- text, determinism ----------------------------------------------------------------------


@pytest.mark.parametrize("kind, nbest", [("unigram", -1), ("unigram", 8), ("bpe", -1)])
def test_every_sample_spells_the_same_text(models, kind, nbest):
    _, sp, _ = models[kind]
    lines = corpus(200, seed=2)
    batch = [ids_of(models, kind, line) for line in lines]
    out = sampler_of(models, kind, 0.3, nbest)(batch, np.arange(len(lines)), 1)
    assert [sp.decode(list(pieces_of(models, kind, o[:-1]))) for o in out] == lines
    assert sum(not np.array_equal(a, b) for a, b in zip(out, batch)) > 50


@pytest.mark.parametrize("kind, nbest", [("unigram", -1), ("unigram", 8), ("bpe", -1)])
def test_a_sequence_cut_inside_a_word_keeps_its_text(models, kind, nbest):
    """A language-model block may start and end inside a word, and <unk> may sit inside one."""
    lines = corpus(100, seed=4)
    batch = [ids_of(models, kind, line)[1:-2] for line in lines]  # first and last pieces cut
    batch = [np.r_[b[:3], UNK, b[3:]] for b in batch]
    out = sampler_of(models, kind, 0.4, nbest)(batch, np.arange(len(batch)), 1)
    for got, ids in zip(out, batch):  # "<unk>" spelled out: it stays where it was
        assert "".join(pieces_of(models, kind, got)) == "".join(pieces_of(models, kind, ids))
    assert sum(not np.array_equal(a, b) for a, b in zip(out, batch)) > 30


def samples(sampler, batch, ids, epoch):
    return {int(i): tuple(o) for i, o in zip(ids, sampler(batch, ids, epoch))}


@pytest.mark.parametrize("kind, nbest", [("unigram", -1), ("unigram", 8), ("bpe", -1)])
def test_the_segmentation_depends_on_seed_epoch_and_id_alone(models, kind, nbest):
    import sentencepiece as spm

    lines = corpus(300, seed=3)
    batch = [ids_of(models, kind, line) for line in lines]
    ids = np.arange(1000, 1000 + len(lines))
    reference = sampler_of(models, kind, 0.3, nbest)
    reference.prepare(np.concatenate(batch), np.array([len(b) for b in batch]))
    first = samples(reference, batch, ids, epoch=2)

    fresh = sampler_of(models, kind, 0.3, nbest)  # no types prepared: met in another order
    order = np.random.default_rng(0).permutation(len(lines))
    spm.set_random_generator_seed(7)  # sentencepiece's own generator, used meanwhile
    _, sp, _ = models[kind]
    for part in np.array_split(order, 7):  # other batches, other orders
        sp.encode(lines[0], enable_sampling=True, alpha=0.1, nbest_size=-1)
        again = samples(fresh, [batch[i] for i in part], ids[part], epoch=2)
        assert all(again[i] == first[i] for i in again)
    worker = pickle.loads(pickle.dumps(reference))  # a data-loader worker's copy
    assert samples(worker, batch[::-1], ids[::-1], epoch=2) == first

    later = samples(reference, batch, ids, epoch=3)
    other_seed = samples(sampler_of(models, kind, 0.3, nbest, seed=2), batch, ids, epoch=2)
    for other in (later, other_seed):
        assert sum(other[i] != first[i] for i in first) > len(lines) // 4


# --- the model and its dictionary -------------------------------------------------------------


def test_the_model_is_read_from_its_file(models):
    for kind, model_type in (("unigram", UNIGRAM), ("bpe", BPE)):
        path, sp, _ = models[kind]
        model = SubwordModel(path)
        assert model.model_type == model_type and model.kind == kind
        assert model.kinds[sp.unk_id()] == UNKNOWN
        assert model.kinds[sp.bos_id()] == model.kinds[sp.eos_id()] == CONTROL
        assert model.dictionary_symbols() == [
            sp.id_to_piece(i) for i in range(3, sp.get_piece_size())
        ]


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda s: SPECIALS + ["low", "new", "<blank>"], ["holds no sentencepiece pieces"]),
        (lambda s: s[:-1] + ["▁foreign", "<blank>"], ["is not the dictionary of", "'▁foreign'"]),
        (lambda s: s[:5] + s[6:], ["lacks 1 pieces of", "--srcdict"]),
    ],
    ids=["word-level", "another-models", "a-piece-missing"],
)
def test_a_dictionary_that_is_not_the_models_is_refused(models, change, words):
    path, _, symbols = models["unigram"]
    symbols = change(list(symbols))
    with pytest.raises(NoisingError) as error:
        SubwordModel(path).map_dictionary(symbols, [0, 1, 2, 3, len(symbols) - 1], UNK, "d.txt")
    assert "d.txt" in error.value.message and "\n" not in str(error.value)
    for word in words:
        assert word in error.value.message
