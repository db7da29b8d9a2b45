"""The bigram statistics equal brute-force Python counts, on PTB and on random streams."""

from collections import Counter, defaultdict

import numpy as np
import pytest
from conftest import require_shared
from fairseq.data import Dictionary, data_utils

from fairseq_noising.ngram_stats import chen_goodman_discounts, sentence_stats, stream_stats
from fairseq_noising.stats_cache import load_or_build_stats, read_split, read_token_stream


def brute_force(pairs, tokens, vocab_size, stream_start=None):
    """Every statistic from plain Python counting of (first, second) bigram tokens.

    ``stream_start``: the first token of a stream, which counts one distinct predecessor when it
    has none (the authors' edge case)."""
    c = Counter(tokens)
    bigram = Counter(pairs)
    successors = defaultdict(list)
    for (a, _), n in bigram.items():
        successors[a].append(n)
    predecessors = Counter(b for (_, b) in bigram)
    if stream_start is not None and predecessors[stream_start] == 0:
        predecessors[stream_start] = 1
    expect = {
        "unigram": [c[x] for x in range(vocab_size)],
        "successor_total": [sum(successors[x]) for x in range(vocab_size)],
        "distinct_successors": [len(successors[x]) for x in range(vocab_size)],
        "distinct_predecessors": [predecessors[x] for x in range(vocab_size)],
        "n1": [sum(1 for n in successors[x] if n == 1) for x in range(vocab_size)],
        "n2": [sum(1 for n in successors[x] if n == 2) for x in range(vocab_size)],
        "n3plus": [sum(1 for n in successors[x] if n >= 3) for x in range(vocab_size)],
    }
    n = Counter(bigram.values())
    y = n[1] / (n[1] + 2 * n[2])
    discounts = [1 - 2 * y * n[2] / n[1], 2 - 3 * y * n[3] / n[2], 3 - 4 * y * n[4] / n[3]]
    return expect, discounts


def assert_matches(stats, expect, discounts):
    for name, values in expect.items():
        np.testing.assert_array_equal(getattr(stats, name), np.array(values), err_msg=name)
    np.testing.assert_allclose(stats.discounts, np.clip(discounts, 0, [1, 2, 3]), rtol=1e-12)


@pytest.fixture(scope="module")
def ptb_stream(ptb_bin):
    dictionary = Dictionary.load(str(ptb_bin / "dict.txt"))
    dataset = data_utils.load_indexed_dataset(str(ptb_bin / "train"), dictionary)
    tokens, sizes = read_token_stream(dataset)
    return dictionary, dataset, tokens, sizes


@pytest.mark.slow
def test_stream_is_fairseqs_binarization_of_ptb(ptb_stream):
    dictionary, _, tokens, sizes = ptb_stream
    text = require_shared("ptb", "ptb.train.txt").read_text(encoding="utf-8").split("\n")
    lines = [line.split() for line in text if line.strip()]
    expected = [dictionary.index(w) for line in lines for w in line + ["</s>"]]
    assert len(lines) == 42068 and len(expected) == 929589
    np.testing.assert_array_equal(tokens, np.array(expected))
    np.testing.assert_array_equal(sizes, [len(line) + 1 for line in lines])


@pytest.mark.slow
def test_ptb_stream_stats_equal_brute_force(ptb_stream):
    dictionary, dataset, tokens, _ = ptb_stream
    stream = tokens.tolist()
    expect, discounts = brute_force(
        list(zip(stream[:-1], stream[1:])), stream, len(dictionary), stream_start=stream[0]
    )
    assert_matches(stream_stats(tokens, len(dictionary)), expect, discounts)
    # the cached path gives the same statistics
    prefix = str(dataset_prefix(dataset))
    assert_matches(
        load_or_build_stats(read_split(prefix, dataset), dictionary, "stream"), expect, discounts
    )


def dataset_prefix(dataset):
    return dataset._path


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_stream_stats_equal_brute_force(seed):
    rng = np.random.default_rng(seed)
    vocab = 60
    tokens = rng.zipf(1.3, size=20000) % vocab
    stream = tokens.tolist()
    expect, discounts = brute_force(
        list(zip(stream[:-1], stream[1:])), stream, vocab, stream_start=stream[0]
    )
    assert_matches(stream_stats(tokens, vocab), expect, discounts)


@pytest.mark.parametrize("seed", [0, 1])
def test_sentence_stats_count_bigrams_inside_sentences_only(seed):
    rng = np.random.default_rng(seed)
    vocab = 40
    sizes = rng.integers(1, 12, size=3000)
    tokens = rng.zipf(1.2, size=int(sizes.sum())) % vocab
    pairs, start = [], 0
    for size in sizes.tolist():
        sentence = tokens[start : start + size].tolist()
        pairs.extend(zip(sentence[:-1], sentence[1:]))
        start += size
    expect, discounts = brute_force(pairs, tokens.tolist(), vocab)
    assert_matches(sentence_stats(tokens, sizes, vocab), expect, discounts)


def test_discounts_are_zero_where_undefined_and_clipped():
    # only singletons: n2 = n3 = 0, so D2 and D3+ are undefined
    d = chen_goodman_discounts(np.array([1, 1, 1]))
    assert d[0] == pytest.approx(1.0) and d[1] == 0 and d[2] == 0
    # by hand: n1 = 1, n2 = 2, n3 = 1, n4 = 1 (9 counts as 3+ only); Y = 1/5,
    # D1 = 1 - 2Y(2/1) = 0.2, D2 = 2 - 3Y(1/2) = 1.7, D3+ = 3 - 4Y(1/1) = 2.2
    np.testing.assert_allclose(
        chen_goodman_discounts(np.array([1, 2, 2, 3, 4, 9])), [0.2, 1.7, 2.2], rtol=1e-12
    )
    # by hand: n1 = 10, n2 = 1, n3 = 10, n4 = 0; Y = 10/12, D1 = 1 - 2Y(1/10) = 5/6,
    # D2 = 2 - 3Y(10/1) = -23 clipped to 0, D3+ = 3 - 4Y(0/10) = 3
    np.testing.assert_allclose(
        chen_goodman_discounts(np.array([1] * 10 + [2] + [3] * 10)),
        [5 / 6, 0.0, 3.0],
        rtol=1e-12,
        atol=0,
    )
