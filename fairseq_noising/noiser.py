"""Applies a :class:`~fairseq_noising.schemes.NoiseScheme` to padded batches (pure numpy): one
draw per position noises the context token and, for kn and mkn, replaces the target, as two
parallel sequences; every random number is a hash of (seed, epoch, side, example id, position),
so an example's noise depends on nothing else (docs/schemes.md)."""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .schemes import NoiseScheme

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S32 = (np.uint64(s) for s in (30, 27, 31, 32))
_LOW32 = np.uint64(0xFFFFFFFF)
_TWO32 = float(1 << 32)

# each side of a translation pair hashes with its own key, so their noise is independent; keys 2
# and 3 are the subword sampling of sides 0 and 1 (fairseq_noising.subword.sampler)
SIDE_KEYS = (0x5EED0000, 0x5EED0001, 0x5EED0002, 0x5EED0003)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective, well-mixing hash of 64-bit integers (in place)."""
    x += _GOLDEN
    x ^= x >> _S30
    x *= _MIX1
    x ^= x >> _S27
    x *= _MIX2
    x ^= x >> _S31
    return x


def _mix_int(x: int) -> int:
    """splitmix64's finaliser on a Python integer (for the per-call key)."""
    mask = 0xFFFFFFFFFFFFFFFF
    x = (x + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def position_hashes(seed, epoch, ids, positions, side=0):
    """One 64-bit hash per token, keyed by (seed, epoch, side, example id, position).

    ``ids`` has shape [B] and ``positions`` [B, T] (or [1, T]). Each hash is one splitmix64 round
    over ``id * M1 + position * M2 + key(seed, epoch, side)``. The high 32 bits decide whether
    the position is noised, the low 32 bits pick the context replacement; the target
    replacement (kn, mkn) hashes the hash once more.
    """
    key = _mix_int(
        _mix_int(_mix_int(int(seed) & 0xFFFFFFFFFFFFFFFF) ^ int(epoch)) ^ SIDE_KEYS[side]
    )
    with np.errstate(over="ignore"):
        per_example = np.asarray(ids, dtype=np.int64).astype(np.uint64)[:, None] * _MIX1
        per_example += np.uint64(key)
        cells = np.asarray(positions, dtype=np.int64).astype(np.uint64) * _MIX2
        cells = cells + per_example
        return _mix(cells)


def _low_uniform(hashes: np.ndarray) -> np.ndarray:
    return (hashes & _LOW32) * (1.0 / _TWO32)


def positions_in_example(tokens: np.ndarray, pad: int) -> np.ndarray:
    """Index of each token inside its own example, whether the batch is left- or right-padded.

    Shape [B, T], or [1, T] when no example is left-padded (positions are then the columns).
    """
    if tokens.shape[0] == 0 or not (tokens[:, 0] == pad).any():
        return np.arange(tokens.shape[1], dtype=np.int64)[None, :]
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
        # noised when the high 32 bits of the position's hash fall below gamma * 2^32
        self._threshold = np.round(np.clip(scheme.gamma, 0.0, 1.0) * _TWO32).astype(np.uint64)
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
        """Noise ``context`` [B, T] and, for kn/mkn, ``target`` [B, T] (may be None)."""
        context = np.asarray(context, dtype=np.int64)
        hashes = position_hashes(self.seed, epoch, ids, positions, self.side)
        fired = (hashes >> _S32) < self._threshold[context]
        where = np.flatnonzero(fired)  # replacements are drawn only where noise fires
        flat_hashes = hashes.reshape(-1)[where]
        noised_context = context.copy()
        noised_context.reshape(-1)[where] = self._draw(_low_uniform(flat_hashes))

        noised_target, target_replaced = target, None
        if target is not None:
            target = np.asarray(target, dtype=np.int64)
            noised_target = target
            target_replaced = np.zeros_like(fired)
            if self.scheme.noise_target:
                # a target that is itself special (padding, a special </s>) is never replaced
                keep = self._ordinary[target.reshape(-1)[where]]
                where, flat_hashes = where[keep], flat_hashes[keep]
                with np.errstate(over="ignore"):
                    second = _mix(flat_hashes ^ _GOLDEN)
                noised_target = target.copy()
                noised_target.reshape(-1)[where] = self._draw(_low_uniform(second))
                target_replaced.reshape(-1)[where] = True
        return NoisedTokens(noised_context, noised_target, fired, target_replaced)
