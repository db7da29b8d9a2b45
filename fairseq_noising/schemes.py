"""The noising schemes of Xie et al. (2017), Table 1, plus the authors' code's extras (pure numpy).

A scheme is two vectors over the vocabulary and a flag:

- ``gamma[x]``: the probability that a context token x is noised;
- ``proposal[x]``: q(x), the distribution a replacement is drawn from (``None`` for blank);
- ``noise_target``: whether the prediction target at a noised position is replaced too.

=========  ==========================================  =========================  ===================
scheme     gamma(x)                                    q                          replaced
=========  ==========================================  =========================  ===================
none       0                                           --                         --
blank      g0                                          the ``<blank>`` symbol     context
uniform    g0                                          uniform over seen types    context
unigram    g0                                          c(x) / N                   context
ad         g0 N1+(x,.) / sum_y c(x,y)                  c(x) / N                   context
kn         g0 N1+(x,.) / sum_y c(x,y)                  N1+(., x)                  context and target
mkn        g0 (D1 n1 + D2 n2 + D3+ n3+)(x) / sum c     N1+(., x)                  context and target
=========  ==========================================  =========================  ===================

Probabilities are clipped to [0, 1]; a token with no successor in the training data gets g0.
Special symbols (``special_ids``: padding, begin of sentence, blank, and the end of sentence in
translation or with ``--special-eos``) are never noised and never drawn; their gamma and q are 0.
The unknown word is an ordinary token.
"""

from dataclasses import dataclass
from typing import Iterable, Optional, Tuple

import numpy as np

from .ngram_stats import BigramStats

SCHEMES = ("none", "blank", "uniform", "unigram", "ad", "kn", "mkn")
TARGET_NOISING_SCHEMES = ("kn", "mkn")


@dataclass(frozen=True)
class NoiseScheme:
    name: str
    gamma0: float
    gamma: np.ndarray  # float64 [V]
    proposal: Optional[np.ndarray]  # float64 [V], sums to 1; None for blank and none
    noise_target: bool
    special_ids: Tuple[int, ...] = ()
    blank_index: Optional[int] = None

    @property
    def vocab_size(self) -> int:
        return int(self.gamma.shape[0])

    @property
    def is_active(self) -> bool:
        return bool(self.gamma.any())


def _discounted_ratio(numerator: np.ndarray, stats: BigramStats, gamma0: float) -> np.ndarray:
    """g0 * numerator / sum_y c(x, y), and g0 where x has no successor; clipped to [0, 1]."""
    total = stats.successor_total.astype(np.float64)
    ratio = np.divide(
        numerator.astype(np.float64), total, out=np.ones_like(total), where=total > 0
    )
    return np.clip(gamma0 * ratio, 0.0, 1.0)


def _normalised(weights: np.ndarray, what: str) -> np.ndarray:
    total = weights.sum()
    if not total > 0:
        raise ValueError(f"the {what} proposal distribution is empty: no eligible token in training")
    return weights / total


def build_scheme(
    name: str,
    stats: BigramStats,
    gamma0: float,
    special_ids: Iterable[int],
    blank_index: Optional[int] = None,
    vocab_size: Optional[int] = None,
) -> NoiseScheme:
    """The scheme ``name`` with base probability ``gamma0`` over ``vocab_size`` token ids.

    ``stats`` may cover fewer ids than ``vocab_size`` (symbols added after counting, such as
    ``<blank>``, have zero counts).
    """
    if name not in SCHEMES:
        raise ValueError(f"unknown noising scheme {name!r}; expected one of {', '.join(SCHEMES)}")
    if not 0.0 <= gamma0 <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma0}")
    stats = stats.resized(vocab_size or stats.vocab_size)
    size = stats.vocab_size
    eligible = np.ones(size, dtype=bool)
    special = np.asarray([i for i in special_ids if i is not None and 0 <= i < size], dtype=np.int64)
    eligible[special] = False

    if name == "none":
        gamma = np.zeros(size)
    elif name in ("blank", "uniform", "unigram"):
        gamma = np.full(size, float(gamma0))
    elif name in ("ad", "kn"):
        gamma = _discounted_ratio(stats.distinct_successors, stats, gamma0)
    else:  # mkn
        d1, d2, d3 = stats.discounts
        mass = d1 * stats.n1 + d2 * stats.n2 + d3 * stats.n3plus
        gamma = _discounted_ratio(mass, stats, gamma0)
    gamma = np.where(eligible, gamma, 0.0)

    proposal = None
    if name == "blank":
        if blank_index is None:
            raise ValueError("the blank scheme needs the index of the <blank> symbol")
    elif name == "uniform":
        proposal = _normalised((eligible & (stats.unigram > 0)).astype(np.float64), "uniform")
    elif name in ("unigram", "ad"):
        proposal = _normalised(np.where(eligible, stats.unigram, 0).astype(np.float64), "unigram")
    elif name in ("kn", "mkn"):
        weights = np.where(eligible, stats.distinct_predecessors, 0).astype(np.float64)
        proposal = _normalised(weights, "Kneser-Ney")

    return NoiseScheme(
        name=name,
        gamma0=float(gamma0),
        gamma=gamma,
        proposal=proposal,
        noise_target=name in TARGET_NOISING_SCHEMES,
        special_ids=tuple(int(i) for i in special),
        blank_index=blank_index,
    )
