"""Applies a :class:`~fairseq_noising.schemes.NoiseScheme` to padded batches (pure numpy).

At each position j a model reads the context token x_j and predicts the target y_j. One Bernoulli
draw with probability gamma(x_j) decides whether position j is noised; when it fires, x_j is
replaced (by ``<blank>`` or a draw from q) and, for schemes that noise targets (kn, mkn), y_j is
replaced by an independent draw from q. Target positions that hold a special symbol (end of
sentence, padding) are never replaced.

As in the authors' code, a noised target is *not* copied into the next input: x_{j+1} keeps its
own (original or independently noised) value even when y_j, which equals x_{j+1} in the clean
data, was replaced. The context and the targets are noised as two parallel sequences.

Randomness is counter-based: every random number is a hash of (seed, epoch, example id, position
of the token inside its example, stream). The noise of an example therefore depends on nothing
else: not on which batch it lands in, its padding, the number of data-loader workers, the
distributed rank, or whether training was resumed from a checkpoint.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .schemes import NoiseScheme

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = (np.uint64(s) for s in (30, 27, 31, 11))

# stream numbers: what a random number is used for, and on which side of a translation pair
FIRE, CONTEXT_DRAW, TARGET_DRAW = 0, 1, 2
STREAMS_PER_SIDE = 4


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective, well-mixing hash of 64-bit integers."""
    x = x + _GOLDEN
    x = (x ^ (x >> _S30)) * _MIX1
    x = (x ^ (x >> _S27)) * _MIX2
    return x ^ (x >> _S31)


def counter_uniforms(seed, epoch, ids, positions, streams):
    """Uniform floats in [0, 1), one per (position, stream), keyed by seed, epoch and example id.

    ``ids`` has shape [B]; ``positions`` [B, T]; ``streams`` is a sequence of stream numbers.
    Returns an array of shape [len(streams), B, T].
    """
    with np.errstate(over="ignore"):
        key = _mix(_mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF)) ^ np.uint64(epoch))
        per_example = _mix(key ^ _mix(np.asarray(ids, dtype=np.int64).astype(np.uint64)))
        cells = _mix(per_example[:, None] ^ (np.asarray(positions, dtype=np.int64).astype(np.uint64) * _MIX2))
        out = np.empty((len(streams),) + cells.shape, dtype=np.float64)
        for k, stream in enumerate(streams):  # a handful of streams, each fully vectorised
            bits = _mix(cells + np.uint64(stream + 1) * _MIX1) >> _S11
            out[k] = bits * (1.0 / (1 << 53))
    return out


def positions_in_example(tokens: np.ndarray, pad: int) -> np.ndarray:
    """Index of each token inside its own example, whether the batch is left- or right-padded."""
    return np.cumsum(tokens != pad, axis=1) - 1


@dataclass
class NoisedTokens:
    context: np.ndarray
    target: Optional[np.ndarray]
    fired: np.ndarray  # bool [B, T]: the context token at this position was noised
    target_replaced: Optional[np.ndarray]  # bool [B, T]


class Noiser:
    """Noises (context, target) sequences for one side with one scheme and one seed."""

    def __init__(self, scheme: NoiseScheme, seed: int, side: int = 0):
        self.scheme = scheme
        self.seed = int(seed)
        self.side = int(side)
        self._cdf = None
        if scheme.proposal is not None:
            self._cdf = np.cumsum(scheme.proposal)
            self._last_drawable = int(np.flatnonzero(scheme.proposal > 0)[-1])
        self._ordinary = np.ones(scheme.vocab_size, dtype=bool)
        self._ordinary[list(scheme.special_ids)] = False

    def _draw(self, u: np.ndarray) -> np.ndarray:
        if self._cdf is None:
            return np.full(u.shape, self.scheme.blank_index, dtype=np.int64)
        picked = np.searchsorted(self._cdf, u * self._cdf[-1], side="right")
        return np.minimum(picked, self._last_drawable)

    def __call__(self, context, target, ids, positions, epoch) -> NoisedTokens:
        """Noise ``context`` [B, T] and, for kn/mkn, ``target`` [B, T] (may be None).

        Token ids beyond the scheme's vocabulary are treated as specials (never noised).
        """
        context = np.asarray(context, dtype=np.int64)
        streams = [self.side * STREAMS_PER_SIDE + s for s in (FIRE, CONTEXT_DRAW, TARGET_DRAW)]
        noise_target = self.scheme.noise_target and target is not None
        u = counter_uniforms(self.seed, epoch, ids, positions, streams[: 3 if noise_target else 2])
        gamma = self.scheme.gamma
        in_vocab = context < gamma.shape[0]
        probability = np.where(in_vocab, gamma[np.where(in_vocab, context, 0)], 0.0)
        fired = u[0] < probability
        noised_context = np.where(fired, self._draw(u[1]), context)
        noised_target, target_replaced = target, None
        if target is not None:
            target = np.asarray(target, dtype=np.int64)
            target_replaced = np.zeros_like(fired)
            noised_target = target
            if noise_target:
                in_vocab_t = target < gamma.shape[0]
                # a target that is itself special (end of sentence, padding) is never replaced
                ordinary = in_vocab_t & (self._ordinary[np.where(in_vocab_t, target, 0)])
                target_replaced = fired & ordinary
                noised_target = np.where(target_replaced, self._draw(u[2]), target)
        return NoisedTokens(noised_context, noised_target, fired, target_replaced)
