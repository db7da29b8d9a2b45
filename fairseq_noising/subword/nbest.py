"""Sampling a segment from its nbest best segmentations under a unigram model, as sentencepiece's
``nbest_size >= 1`` does: sentencepiece lists them, our generator picks one with
p ∝ exp(alpha * score), the score being the sum of its pieces' log probabilities.

Listing is the cost (sentencepiece's NBestEncode, about 0.5 ms a sentence at 64): the lists of
the training split's segments are made once (:meth:`NBestSampler.add`) and kept in flat arrays;
a segment met later (a language-model block cut inside a sentence) is listed at each call.
"""

from itertools import chain
from typing import List

import numpy as np

from .flat import ranges
from .model import NORMAL
from .unigram import UNK_PENALTY

CHUNK = 512  # segments listed per sentencepiece call: Python's lists of ids stay small


class NBestSampler:
    """Draws each segment (a run of whole words) from its ``nbest`` best segmentations."""

    def __init__(self, model, alpha: float, nbest: int):
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=model.path)
        self.alpha, self.nbest = float(alpha), int(nbest)
        normal = model.kinds == NORMAL
        self.score = np.where(normal, model.scores, 0.0)  # as the lattice scores a node
        self.score[model.unk_id] = model.scores[normal].min() - UNK_PENALTY
        self.chars = np.array([len(p) for p in model.pieces], dtype=np.int64)
        self.dtype = np.int16 if len(model.pieces) < 2**15 else np.int32
        self.types = 0
        self._chunks: List[tuple] = []
        self._flat = None

    def _lists(self, strings: List[str], pieces: List[np.ndarray]):
        """(cumulative probability of each candidate plus its segment's number, the number of
        each candidate's pieces, all pieces). A segment whose text does not encode back to as
        many characters (an unknown character beside a space) has its own pieces alone."""
        texts = [s.replace("\u2581", " ")[1:] for s in strings]  # each starts a word: "▁"
        nbests = [n or [[]] for n in self.sp.nbest_encode(texts, nbest_size=self.nbest)]
        return self._table(nbests, pieces)

    def _table(self, nbests, pieces):
        count = np.fromiter(map(len, nbests), dtype=np.int64, count=len(nbests))
        candidates = list(chain.from_iterable(nbests))
        sizes = np.fromiter(map(len, candidates), dtype=np.int64, count=len(candidates))
        flat = np.fromiter(chain.from_iterable(candidates), dtype=np.int64, count=int(sizes.sum()))
        of_piece = np.repeat(np.arange(sizes.size), sizes)
        first, last = np.cumsum(count) - count, np.cumsum(count) - 1
        chars = np.bincount(of_piece, self.chars[flat], sizes.size)[first]
        wrong = set(np.flatnonzero(chars != [self.chars[p].sum() for p in pieces]).tolist())
        if wrong:
            own = [[pieces[i].tolist()] if i in wrong else n for i, n in enumerate(nbests)]
            return self._table(own, pieces)
        score = np.bincount(of_piece, self.score[flat], sizes.size)
        owner = np.repeat(np.arange(count.size), count)
        weight = np.exp(self.alpha * (score - np.maximum.reduceat(score, first)[owner]))
        total = np.cumsum(weight)
        cum = total - (total[first] - weight[first])[owner]
        key = owner + cum / cum[last][owner]
        key[last] = np.arange(count.size) + 1.0
        return key, sizes, flat.astype(self.dtype)

    def add(self, strings: List[str], pieces: List[np.ndarray]) -> None:
        for at in range(0, len(strings), CHUNK):
            key, sizes, flat = self._lists(strings[at : at + CHUNK], pieces[at : at + CHUNK])
            self._chunks.append((key + self.types, sizes, flat))
            self.types += len(strings[at : at + CHUNK])
        self._flat = None

    def ready(self) -> None:
        """The flat arrays, made now (before data-loader workers fork) rather than at a call."""
        if self._flat is None and self._chunks:
            key, sizes, flat = (np.concatenate(parts) for parts in zip(*self._chunks))
            self._chunks = [(key, sizes, flat)]
            self._flat = key, np.r_[0, np.cumsum(sizes)], flat

    @staticmethod
    def _pick(key, ptr, flat, types: np.ndarray, draw):
        """``ptr[c]``: where candidate c's pieces start in ``flat`` (and ``ptr[-1]``, the end)."""
        pick = np.searchsorted(key, types + draw(np.arange(types.size), 0), side="right")
        sizes = ptr[pick + 1] - ptr[pick]
        rows = np.repeat(np.arange(types.size), sizes)
        return rows, flat[ranges(ptr[pick], sizes)].astype(np.int64)

    def sample(self, types: np.ndarray, draw):
        """One segmentation per listed segment ``types[r]``: (r of each piece, piece id)."""
        if not types.size:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        self.ready()
        return self._pick(*self._flat, types, draw)

    def sample_new(self, strings: List[str], pieces: List[np.ndarray], draw):
        """The same for segments that were not listed before (listed now, not kept)."""
        key, sizes, flat = self._lists(strings, pieces)
        return self._pick(key, np.r_[0, np.cumsum(sizes)], flat, np.arange(len(strings)), draw)
