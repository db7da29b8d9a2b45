"""Expected bigram pseudocounts of noised data, exactly, from gamma(x) and q (numpy).

The setting and the formulas (``fairseq-noise-analyze pseudocounts``, Section 3.3 of Xie et al.):
docs/analysis.md, ``pseudocounts``.
"""

from dataclasses import dataclass

import numpy as np


def pair_counts(context: np.ndarray, target: np.ndarray, vocab_size: int):
    """(sorted unique keys a * V + b, counts) of the (context, target) pairs given."""
    keys = np.asarray(context, dtype=np.int64) * vocab_size + np.asarray(target, dtype=np.int64)
    return np.unique(keys, return_counts=True)


def merge_counts(parts):
    """Sums several (keys, counts) pairs."""
    parts = list(parts)
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    keys = np.concatenate([k for k, _ in parts])
    counts = np.concatenate([c for _, c in parts])
    unique, inverse = np.unique(keys, return_inverse=True)
    return unique, np.bincount(inverse, weights=counts, minlength=unique.size).astype(np.int64)


def lookup(keys_sorted: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """values at ``queries`` (0 where a query key is absent)."""
    if keys_sorted.size == 0:
        return np.zeros(queries.shape, dtype=np.float64)
    at = np.minimum(np.searchsorted(keys_sorted, queries), keys_sorted.size - 1)
    return np.where(keys_sorted[at] == queries, values[at], 0).astype(np.float64)


@dataclass
class ExpectedCounts:
    """E[c~(a, b)] for any cell, given the clean counts and the scheme's gamma and q."""

    clean_keys: np.ndarray
    clean_counts: np.ndarray
    gamma: np.ndarray  # [V]
    proposal: np.ndarray  # [V] (one-hot on <blank> for blank noising)
    ordinary: np.ndarray  # bool [V]
    noise_target: bool

    def __post_init__(self):
        v = self.gamma.shape[0]
        a = self.clean_keys // v
        b = self.clean_keys % v
        weighted = self.gamma[a] * self.clean_counts
        # S(b) = sum_x gamma(x) c(x, b)
        self.fired_into = np.bincount(b, weights=weighted, minlength=v)
        self.fired_ordinary_total = float(weighted[self.ordinary[b]].sum())  # T

    @property
    def vocab_size(self) -> int:
        return int(self.gamma.shape[0])

    def __call__(self, keys: np.ndarray) -> np.ndarray:
        v = self.vocab_size
        a, b = keys // v, keys % v
        clean = lookup(self.clean_keys, self.clean_counts, keys)
        out = (1.0 - self.gamma[a]) * clean
        if self.noise_target:
            out += self.proposal[a] * (
                self.proposal[b] * self.fired_ordinary_total
                + np.where(self.ordinary[b], 0.0, self.fired_into[b])
            )
        else:
            out += self.proposal[a] * self.fired_into[b]
        return out

    def interpolation(self, keys: np.ndarray, gamma0: float) -> np.ndarray:
        """Section 3.3's (1 - g) c(a, b) + g q(a) c'(b), c'(b) from noisable contexts only."""
        v = self.vocab_size
        a, b = keys // v, keys % v
        noisable = self.gamma > 0
        ca = self.clean_keys // v
        c_prime = np.bincount(
            self.clean_keys % v, weights=self.clean_counts * noisable[ca], minlength=v
        )
        clean = lookup(self.clean_keys, self.clean_counts, keys)
        return (
            np.where(noisable[a], 1.0 - gamma0, 1.0) * clean
            + gamma0 * self.proposal[a] * c_prime[b]
        )


def compare(expected: np.ndarray, observed_mean: np.ndarray, draws: int, min_expected: float):
    """Relative deviations |observed - expected| / expected on the cells with expected >= min.

    Also returns the z-score of each cell under a Poisson approximation of the sum over
    ``draws`` draws (observed_mean * draws has variance about expected * draws).
    """
    keep = expected >= min_expected
    rel = np.abs(observed_mean - expected) / np.where(expected > 0, expected, 1.0)
    z = (observed_mean - expected) * np.sqrt(draws) / np.sqrt(np.where(expected > 0, expected, 1.0))
    return keep, rel, z
