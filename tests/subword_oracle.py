"""An oracle for subword sampling that shares no code with ``fairseq_noising``.

It enumerates: every segmentation of a word into pieces of a vocabulary and its probability
under unigram sampling (p ∝ prod p(piece)^alpha, sentencepiece's ``nbest_size=-1``); the nbest
best segmentations of a sentence and their probabilities (``nbest_size >= 1``); and the exact
distribution of BPE-dropout's result (Provilkov et al., 2020, Algorithm 1: at every merge step
each applicable merge is dropped with probability p, the best surviving one is applied, and the
word is done when none survives). Pieces are strings; the vocabulary comes from sentencepiece's
own API (``id_to_piece``, ``get_score``), nothing here knows fairseq's ids.
"""

import itertools
import math
from collections import defaultdict
from functools import lru_cache


def vocabulary(sp):
    """{piece: score} of a sentencepiece processor's ordinary pieces (no <unk>, <s>, </s>)."""
    return {
        sp.id_to_piece(i): sp.get_score(i)
        for i in range(sp.get_piece_size())
        if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) or sp.is_byte(i))
    }


def segmentations(word, vocab):
    """Every way to cut ``word`` into pieces of ``vocab`` (tuples of strings)."""
    if not word:
        return [()]
    out = []
    for end in range(1, len(word) + 1):
        if word[:end] in vocab:
            out += [(word[:end],) + rest for rest in segmentations(word[end:], vocab)]
    return out


def unigram_distribution(word, vocab, alpha):
    """{segmentation: probability} with p ∝ exp(alpha * sum of the pieces' log probabilities)."""
    weights = {s: math.exp(alpha * sum(vocab[p] for p in s)) for s in segmentations(word, vocab)}
    total = sum(weights.values())
    return {s: w / total for s, w in weights.items()}


def nbest_distribution(words, vocab, alpha, nbest):
    """The nbest best segmentations of a sentence of ``words`` (one tuple of pieces), by score,
    with p ∝ exp(alpha * score); checks that no tie straddles the cut."""
    scored = []
    for parts in itertools.product(*(segmentations(w, vocab) for w in words)):
        pieces = tuple(p for part in parts for p in part)
        scored.append((sum(vocab[p] for p in pieces), pieces))
    scored.sort(reverse=True)
    if len(scored) > nbest:
        assert scored[nbest - 1][0] - scored[nbest][0] > 1e-4, "a tie at the n-best cut"
    best = scored[:nbest]
    top = best[0][0]
    weights = {s: math.exp(alpha * (score - top)) for score, s in best}
    total = sum(weights.values())
    return {s: w / total for s, w in weights.items()}


def bpe_dropout_distribution(word, vocab, p):
    """{segmentation: probability} of Algorithm 1 on ``word``'s characters. A merge's priority
    is its piece's score (sentencepiece's BPE: higher first), the leftmost first on a tie."""

    @lru_cache(maxsize=None)
    def finish(state):
        candidates = sorted(
            (-vocab[state[i] + state[i + 1]], i)
            for i in range(len(state) - 1)
            if state[i] + state[i + 1] in vocab
        )
        out = defaultdict(float)
        out[state] += p ** len(candidates)  # every candidate dropped: done
        for k, (_, i) in enumerate(candidates):  # the k better ones dropped, this one kept
            merged = state[:i] + (state[i] + state[i + 1],) + state[i + 2 :]
            for final, q in finish(merged).items():
                out[final] += p**k * (1 - p) * q
        return dict(out)

    return finish(tuple(word))


def chi_square_critical(df, z=4.0):
    """Wilson-Hilferty: the chi-square quantile matching a one-sided normal z (z=4: p ~ 3e-5)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi_square(counts, distribution, draws):
    """(statistic, degrees of freedom) of observed ``counts`` against ``distribution``; cells
    expected fewer than 5 times are pooled; a draw outside the distribution fails at once."""
    outside = set(counts) - set(distribution)
    assert not outside, f"drawn but impossible: {sorted(outside)[:3]}"
    small = [s for s, q in distribution.items() if q * draws < 5]
    cells = [([s], q) for s, q in distribution.items() if q * draws >= 5]
    if small:
        cells.append((small, sum(distribution[s] for s in small)))
    statistic = 0.0
    for members, q in cells:
        observed = sum(counts.get(s, 0) for s in members)
        statistic += (observed - q * draws) ** 2 / (q * draws)
    return statistic, max(len(cells) - 1, 1)
