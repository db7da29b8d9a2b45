"""Sampling a segment from its nbest best segmentations under a unigram model, as sentencepiece's
``nbest_size >= 1`` does: sentencepiece lists them (one batched call), our generator picks one
with p ∝ exp(alpha * score), the score being the sum of its pieces' log probabilities.
"""

from itertools import chain

import numpy as np

from .flat import ranges
from .model import NORMAL
from .unigram import UNK_PENALTY


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

    def sample(self, pieces: np.ndarray, start: np.ndarray, length: np.ndarray, draw):
        """Segment r is ``pieces[start[r]:start[r] + length[r]]`` (model ids): (r of each piece,
        piece id), in order. A segment whose text does not encode back to as many characters
        (an unknown character beside a space) keeps its pieces."""
        count = start.size
        texts = self.sp.decode([pieces[s : s + n].tolist() for s, n in zip(start, length)])
        nbests = [n or [[]] for n in self.sp.nbest_encode(texts, nbest_size=self.nbest)]
        per_segment = np.fromiter(map(len, nbests), dtype=np.int64, count=count)
        candidates = list(chain.from_iterable(nbests))
        sizes = np.fromiter(map(len, candidates), dtype=np.int64, count=len(candidates))
        flat = np.fromiter(chain.from_iterable(candidates), dtype=np.int64, count=int(sizes.sum()))
        owner_of_piece = np.repeat(np.arange(sizes.size), sizes)
        score = np.bincount(owner_of_piece, self.score[flat], minlength=sizes.size)
        chars = np.bincount(owner_of_piece, self.chars[flat], minlength=sizes.size)
        owner = np.repeat(np.arange(count), per_segment)
        first = np.cumsum(per_segment) - per_segment
        own_pieces = self.chars[pieces[ranges(start, length)]]
        own_chars = np.bincount(np.repeat(np.arange(count), length), own_pieces, count)
        kept = chars[first] == own_chars
        last = np.cumsum(per_segment) - 1

        weight = np.exp(self.alpha * (score - np.maximum.reduceat(score, first)[owner]))
        total = np.cumsum(weight)
        cum = total - (total[first] - weight[first])[owner]
        key = owner + cum / cum[last][owner]
        key[last] = np.arange(count) + 1.0
        pick = np.searchsorted(key, np.arange(count) + draw(np.arange(count), 0), side="right")

        sampled, own = np.flatnonzero(kept), np.flatnonzero(~kept)
        picked = pick[sampled]
        starts_of = np.cumsum(sizes) - sizes
        rows = np.r_[np.repeat(sampled, sizes[picked]), np.repeat(own, length[own])]
        values = np.r_[
            flat[ranges(starts_of[picked], sizes[picked])], pieces[ranges(start[own], length[own])]
        ]
        order = np.argsort(rows, kind="stable")
        return rows[order], values[order]
