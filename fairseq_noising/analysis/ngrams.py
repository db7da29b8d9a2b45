"""Evaluation positions whose bigram or trigram never occurs in the training data (numpy).

A split is read as one token stream with one ``</s>`` before its first token; the convention
(``fairseq-noise-analyze unseen``, Table 6 of Xie et al.): docs/analysis.md, ``unseen``.
"""

import numpy as np


def _prefixed(stream, eos: int) -> np.ndarray:
    stream = np.asarray(stream, dtype=np.int64)
    return np.concatenate([np.array([eos], dtype=np.int64), stream])


def _check_vocab(vocab_size: int) -> None:
    if vocab_size**3 >= 2**63:
        raise ValueError(f"a vocabulary of {vocab_size} types is too large for packed trigram keys")


def bigram_keys(s: np.ndarray, vocab_size: int) -> np.ndarray:
    """Key of (s[i], s[i+1]) for every i (length len(s) - 1)."""
    return s[:-1] * vocab_size + s[1:]


def trigram_keys(s: np.ndarray, vocab_size: int) -> np.ndarray:
    """Key of (s[i], s[i+1], s[i+2]) for every i (length len(s) - 2)."""
    return (s[:-2] * vocab_size + s[1:-1]) * vocab_size + s[2:]


def _member(keys: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    if sorted_unique.size == 0:
        return np.zeros(keys.shape, dtype=bool)
    at = np.searchsorted(sorted_unique, keys)
    at = np.minimum(at, sorted_unique.size - 1)
    return sorted_unique[at] == keys


class NgramIndex:
    """The bigram and trigram types of a training stream."""

    def __init__(self, train_stream, vocab_size: int, eos: int):
        _check_vocab(vocab_size)
        self.vocab_size = int(vocab_size)
        self.eos = int(eos)
        s = _prefixed(train_stream, eos)
        self.bigrams = np.unique(bigram_keys(s, self.vocab_size))
        self.trigrams = np.unique(trigram_keys(s, self.vocab_size))

    def unseen(self, eval_stream):
        """Per stream position p: (unseen bigram, unseen trigram, trigram defined) bool arrays."""
        s = _prefixed(eval_stream, self.eos)
        n = s.size - 1
        unseen_bigram = ~_member(bigram_keys(s, self.vocab_size), self.bigrams)
        defined = np.zeros(n, dtype=bool)
        defined[1:] = True
        unseen_trigram = np.zeros(n, dtype=bool)
        if n > 1:
            unseen_trigram[1:] = ~_member(trigram_keys(s, self.vocab_size), self.trigrams)
        return unseen_bigram, unseen_trigram, defined
