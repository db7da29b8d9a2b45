"""Unigram and bigram statistics that the noising schemes need (pure numpy, no fairseq).

:func:`stream_stats` counts a language model's stream, :func:`sentence_stats` a translation side;
what each array holds: docs/schemes.md, "Statistics cache".
"""

from dataclasses import dataclass, fields

import numpy as np

STATS_FORMAT_VERSION = 2


@dataclass(frozen=True)
class BigramStats:
    unigram: np.ndarray
    successor_total: np.ndarray
    distinct_successors: np.ndarray
    distinct_predecessors: np.ndarray
    n1: np.ndarray
    n2: np.ndarray
    n3plus: np.ndarray
    discounts: np.ndarray  # float64 [3]: D1, D2, D3+

    @property
    def vocab_size(self) -> int:
        return int(self.unigram.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.unigram.sum())

    def to_arrays(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_arrays(cls, arrays) -> "BigramStats":
        missing = [f.name for f in fields(cls) if f.name not in arrays]
        if missing:
            raise KeyError(f"statistics arrays lack {', '.join(missing)}")
        return cls(**{f.name: np.asarray(arrays[f.name]) for f in fields(cls)})

    def resized(self, vocab_size: int) -> "BigramStats":
        """The same statistics over a larger vocabulary (new symbols have zero counts)."""
        if vocab_size < self.vocab_size:
            raise ValueError(
                f"cannot shrink statistics from {self.vocab_size} to {vocab_size} types"
            )
        extra = vocab_size - self.vocab_size
        grown = {
            name: (value if name == "discounts" else np.pad(value, (0, extra)))
            for name, value in self.to_arrays().items()
        }
        return BigramStats(**grown)


def chen_goodman_discounts(bigram_counts: np.ndarray) -> np.ndarray:
    """Modified Kneser-Ney discounts D1, D2, D3+ (Chen and Goodman, 1998).

    With n_k the number of bigram types seen exactly k times and Y = n1 / (n1 + 2 n2):
    D1 = 1 - 2Y n2/n1, D2 = 2 - 3Y n3/n2, D3+ = 3 - 4Y n4/n3. A discount whose formula is
    undefined on the data (a zero denominator) is 0; each D_k is clipped to [0, k].
    """
    counts_of_counts = np.bincount(np.minimum(bigram_counts, 5), minlength=6)
    n1, n2, n3, n4 = (float(counts_of_counts[k]) for k in (1, 2, 3, 4))
    y = n1 / (n1 + 2.0 * n2) if (n1 + 2.0 * n2) > 0 else 0.0

    def discount(k, n_k, n_next):
        if n_k <= 0:
            return 0.0
        return float(np.clip(k - (k + 1) * y * n_next / n_k, 0.0, float(k)))

    return np.array([discount(1, n1, n2), discount(2, n2, n3), discount(3, n3, n4)])


def _from_bigrams(tokens: np.ndarray, first: np.ndarray, second: np.ndarray, vocab_size: int):
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"token ids must lie in [0, {vocab_size}), found ids in "
            f"[{int(tokens.min())}, {int(tokens.max())}]"
        )
    unigram = np.bincount(tokens, minlength=vocab_size).astype(np.int64)
    keys = first.astype(np.int64) * vocab_size + second.astype(np.int64)
    types, counts = np.unique(keys, return_counts=True)
    type_first = types // vocab_size
    type_second = types % vocab_size

    def per_first(weights=None):
        return np.bincount(type_first, weights=weights, minlength=vocab_size).astype(np.int64)

    return BigramStats(
        unigram=unigram,
        successor_total=np.bincount(first, minlength=vocab_size).astype(np.int64),
        distinct_successors=per_first(),
        distinct_predecessors=np.bincount(type_second, minlength=vocab_size).astype(np.int64),
        n1=per_first(counts == 1),
        n2=per_first(counts == 2),
        n3plus=per_first(counts >= 3),
        discounts=chen_goodman_discounts(counts),
    )


def stream_stats(tokens: np.ndarray, vocab_size: int) -> BigramStats:
    """Statistics of one contiguous token stream (language modeling): every adjacent pair.

    As in the authors' code, the stream's first token counts one distinct predecessor when it
    has none (it would otherwise never be drawn from the Kneser-Ney proposal).
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    stats = _from_bigrams(tokens, tokens[:-1], tokens[1:], vocab_size)
    if tokens.size and stats.distinct_predecessors[tokens[0]] == 0:
        stats.distinct_predecessors[tokens[0]] = 1
    return stats


def sentence_stats(tokens: np.ndarray, sizes: np.ndarray, vocab_size: int) -> BigramStats:
    """Statistics of concatenated sentences (translation): pairs inside a sentence only.

    ``tokens`` is the concatenation of the sentences, ``sizes`` their lengths (each sentence
    already holds its final end-of-sentence symbol, as fairseq binarizes it).
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if int(sizes.sum()) != tokens.shape[0]:
        raise ValueError(f"sentence sizes sum to {int(sizes.sum())}, stream has {tokens.shape[0]}")
    # a pair (i, i+1) is inside a sentence unless i is the last position of its sentence
    within = np.ones(max(tokens.shape[0] - 1, 0), dtype=bool)
    sentence_ends = np.cumsum(sizes)[:-1] - 1
    within[sentence_ends[(sentence_ends >= 0) & (sentence_ends < within.shape[0])]] = False
    return _from_bigrams(tokens, tokens[:-1][within], tokens[1:][within], vocab_size)
