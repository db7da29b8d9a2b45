"""BPE-dropout (Provilkov et al., 2020) under a BPE sentencepiece model, vectorised over words.

A word starts as its characters. At each merge step every adjacent pair whose concatenation is a
piece of the model is a candidate; each candidate is dropped with probability alpha, anew at each
step; the surviving candidate of the best merge rank (the highest piece score, the leftmost on a
tie) is merged; the word is done when no candidate survives. alpha = 0 is sentencepiece's own
deterministic BPE, alpha = 1 the characters. All words of a batch step together.
"""

from typing import Callable, List

import numpy as np

from .flat import ranges


class BPEDropoutSampler:
    """The model's merges as a sorted table of (left, right) piece-id pairs; per word type its
    characters' piece ids."""

    def __init__(self, model, alpha: float):
        normal = model.normal_pieces()
        index = {p: i for i, p, _ in normal}
        self.alpha = float(alpha)
        self.unk = model.unk_id
        self.base = np.int64(len(model.pieces))
        keys, merged, rank = [], [], []
        for i, piece, score in normal:
            for cut in range(1, len(piece)):
                left, right = index.get(piece[:cut]), index.get(piece[cut:])
                if left is not None and right is not None:
                    keys.append(left * int(self.base) + right)
                    merged.append(i)
                    rank.append(-score)
        order = np.argsort(keys, kind="stable")
        self.keys = np.asarray(keys, dtype=np.int64)[order]
        self.none = self.keys.size  # the merge of a pair that is no piece: rank inf
        self.merged = np.r_[np.asarray(merged, dtype=np.int64)[order], -1]
        self.rank = np.r_[np.asarray(rank, dtype=np.float64)[order], np.inf]
        self.chars = {p: i for p, i in index.items() if len(p) == 1}
        self.types: List[np.ndarray] = []
        self._flat = None

    def add(self, words: List[str], pieces=None) -> None:
        self.types.extend(
            np.array([self.chars.get(c, self.unk) for c in w], dtype=np.int64) for w in words
        )
        self._flat = None

    def ready(self) -> None:
        """The flat arrays, made now (before data-loader workers fork) rather than at a call."""
        if self._flat is None:
            sizes = np.array([t.size for t in self.types], dtype=np.int64)
            chars = np.concatenate(self.types) if self.types else np.zeros(0, dtype=np.int64)
            self._flat = (np.r_[0, np.cumsum(sizes)], chars, sizes)

    def _lookup(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Where the merge of each pair of symbols is listed; ``none`` where their
        concatenation is no piece (its rank is inf)."""
        pair = left * self.base + right
        where = np.minimum(np.searchsorted(self.keys, pair), self.none - 1)
        found = (left >= 0) & (right >= 0) & (self.keys[where] == pair)
        return np.where(found, where, self.none)

    def sample(self, types: np.ndarray, draw: Callable):
        """One segmentation per word of type ``types[r]``: (r of each piece, piece id), in order.
        ``draw(rows, counters)`` gives a uniform per row for a counter below 2**32."""
        self.ready()
        ptr, chars, sizes = self._flat
        size = sizes[types]
        out = np.full((types.size, int(size.max(initial=1)) + 2), -1, dtype=np.int64)
        out[np.repeat(np.arange(types.size), size), ranges(0 * size, size)] = chars[
            ranges(ptr[types], size)
        ]
        # the words still merging: their symbols, the merge of each adjacent pair, their rows
        row = np.flatnonzero(size > 1)
        symbols, size = out[row], size[row]
        merge = self._lookup(symbols[:, :-1], symbols[:, 1:])
        step = 0
        while row.size:
            used = int(size.max())  # symbols 0 .. used - 1, pairs 0 .. used - 2
            rank = self.rank[merge[:, : used - 1]]
            if self.alpha > 0:
                r, c = np.nonzero(np.isfinite(rank))
                dropped = draw(row[r], (step << 16) | c) < self.alpha
                rank[r[dropped], c[dropped]] = np.inf
            best = np.argmin(rank, axis=1)  # the first of the lowest rank: the leftmost
            going = np.isfinite(rank[np.arange(row.size), best])
            out[row[~going]] = symbols[~going]
            row, symbols, merge, size, best = (x[going] for x in (row, symbols, merge, size, best))
            at = np.arange(row.size)
            symbols[at, best] = self.merged[merge[at, best]]
            size -= 1
            # the pair's right symbol leaves: every symbol and pair after it moves one left
            columns = np.arange(used)
            source = columns + (columns > best[:, None])
            symbols[:, :used] = np.take_along_axis(symbols[:, : used + 1], source, 1)
            merge[:, :used] = np.take_along_axis(merge[:, : used + 1], source, 1)
            for c in (best - 1, best):  # the pairs with the merged symbol, looked up anew
                a = np.flatnonzero(c >= 0)
                merge[a, c[a]] = self._lookup(symbols[a, c[a]], symbols[a, c[a] + 1])
            single = size < 2  # one symbol left: done
            out[row[single]] = symbols[single]
            row, symbols, merge, size = (x[~single] for x in (row, symbols, merge, size))
            step += 1
        rows, cols = np.nonzero(out >= 0)
        return rows, out[rows, cols]
