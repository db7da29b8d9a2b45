"""The noising schemes of Xie et al. (2017), Table 1, plus the authors' code's extras (pure numpy).

A scheme is ``gamma[x]`` (the probability that a context token x is noised), ``proposal[x]`` (q,
a replacement's distribution; ``None`` for blank) and ``noise_target``; each is one
:class:`SchemeSpec` in :data:`REGISTRY`. The table, the special symbols: docs/schemes.md.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Optional, Tuple

import numpy as np

from .errors import NoisingError
from .ngram_stats import BigramStats


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


@dataclass(frozen=True)
class SchemeSpec:
    """How one scheme computes gamma and q, and how users and result tables name it."""

    name: str
    gamma: Callable[[BigramStats, float], np.ndarray]  # (stats, gamma0) -> gamma over all ids
    proposal: Optional[Callable[[BigramStats], np.ndarray]]  # unnormalised q; None: no draw
    noise_target: bool
    help: str  # a few words for --noise-scheme's help
    label: str  # the row label in results tables
    uses_blank: bool = False


REGISTRY: Dict[str, SchemeSpec] = {}


def register_scheme(spec: SchemeSpec) -> SchemeSpec:
    if spec.name in REGISTRY:
        raise ValueError(f"noising scheme {spec.name!r} is registered twice")
    REGISTRY[spec.name] = spec
    return spec


def _constant(stats: BigramStats, gamma0: float) -> np.ndarray:
    return np.full(stats.vocab_size, float(gamma0))


def _discounted_ratio(numerator: np.ndarray, stats: BigramStats, gamma0: float) -> np.ndarray:
    """g0 * numerator / sum_y c(x, y), and g0 where x has no successor; clipped to [0, 1]."""
    total = stats.successor_total.astype(np.float64)
    ratio = np.divide(numerator.astype(np.float64), total, out=np.ones_like(total), where=total > 0)
    return np.clip(gamma0 * ratio, 0.0, 1.0)


def _absolute_discounting(stats: BigramStats, gamma0: float) -> np.ndarray:
    return _discounted_ratio(stats.distinct_successors, stats, gamma0)


def _modified_discounts(stats: BigramStats, gamma0: float) -> np.ndarray:
    d1, d2, d3 = stats.discounts
    return _discounted_ratio(d1 * stats.n1 + d2 * stats.n2 + d3 * stats.n3plus, stats, gamma0)


def _seen_types(stats: BigramStats) -> np.ndarray:
    return (stats.unigram > 0).astype(np.float64)


def _unigram(stats: BigramStats) -> np.ndarray:
    return stats.unigram.astype(np.float64)


def _continuation(stats: BigramStats) -> np.ndarray:
    return stats.distinct_predecessors.astype(np.float64)


for _spec in (
    SchemeSpec(
        "none", lambda stats, g0: np.zeros(stats.vocab_size), None, False, "no noising", "none"
    ),
    SchemeSpec(
        "blank", _constant, None, False, "context tokens become <blank>", "blank", uses_blank=True
    ),
    SchemeSpec("uniform", _constant, _seen_types, False, "uniform replacement", "uniform"),
    SchemeSpec("unigram", _constant, _unigram, False, "unigram replacement", "unigram"),
    SchemeSpec(
        "ad", _absolute_discounting, _unigram, False, "absolute discounting", "absolute discounting"
    ),
    SchemeSpec(
        "kn", _absolute_discounting, _continuation, True, "bigram Kneser-Ney", "bigram Kneser-Ney"
    ),
    SchemeSpec(
        "mkn",
        _modified_discounts,
        _continuation,
        True,
        "Kneser-Ney with modified discounts",
        "Kneser-Ney, modified discounts",
    ),
):
    register_scheme(_spec)

SCHEMES = tuple(REGISTRY)
TARGET_NOISING_SCHEMES = tuple(name for name, spec in REGISTRY.items() if spec.noise_target)


def scheme_help() -> str:
    """The ``--noise-scheme`` help line: every registered scheme with its few words."""
    names = ", ".join(f"{spec.name} ({spec.help})" for spec in REGISTRY.values())
    return f"data noising scheme applied to training batches (Xie et al., 2017): {names}"


def _normalised(weights: np.ndarray, what: str) -> np.ndarray:
    total = weights.sum()
    if not total > 0:
        raise ValueError(
            f"the {what} proposal distribution is empty: no eligible token in training"
        )
    return weights / total


def check_gamma(value, flag: str) -> None:
    """Every gamma_0 of the plugin is checked here (``flag``: what the user set; None: unset)."""
    if value is not None and not 0.0 <= float(value) <= 1.0:
        raise NoisingError(f"{flag} must lie in [0, 1], got {value}")


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
    spec = REGISTRY.get(name)
    if spec is None:
        raise ValueError(f"unknown noising scheme {name!r}; expected one of {', '.join(SCHEMES)}")
    check_gamma(gamma0, "gamma_0")
    if spec.uses_blank and blank_index is None:
        raise ValueError(f"the {name} scheme needs the index of the <blank> symbol")
    stats = stats.resized(vocab_size or stats.vocab_size)
    size = stats.vocab_size
    eligible = np.ones(size, dtype=bool)
    special = np.asarray(
        [i for i in special_ids if i is not None and 0 <= i < size], dtype=np.int64
    )
    eligible[special] = False

    gamma = np.where(eligible, spec.gamma(stats, gamma0), 0.0)
    proposal = None
    if spec.proposal is not None:
        proposal = _normalised(np.where(eligible, spec.proposal(stats), 0.0), spec.label)

    return NoiseScheme(
        name=name,
        gamma0=float(gamma0),
        gamma=gamma,
        proposal=proposal,
        noise_target=spec.noise_target,
        special_ids=tuple(int(i) for i in special),
        blank_index=blank_index,
    )
