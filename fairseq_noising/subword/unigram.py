"""Sampling a word's segmentation under a unigram sentencepiece model, vectorised over words.

Each word type gets its lattice once (the model's pieces that match its characters, an unknown
node where no one-character piece does, as sentencepiece builds it); a word is drawn by forward
filtering, backward sampling: p(segmentation) ∝ prod p(piece)^alpha over every segmentation,
exactly (sentencepiece's ``nbest_size=-1``). docs/subword_sampling.md has the details.
"""

import math
from typing import Callable, List

import numpy as np

UNK_PENALTY = 10.0  # sentencepiece's kUnkPenalty: an unknown character scores min score - 10


class UnigramSampler:
    """Per word type the lattice's arcs; per call, one segmentation of each word drawn with the
    uniforms that ``draw`` gives."""

    def __init__(self, model, alpha: float):
        normal = model.normal_pieces()
        self.vocab = {p: (i, s) for i, p, s in normal}
        self.max_len = max(len(p) for p in self.vocab)
        self.unk = (model.unk_id, min(s for _, _, s in normal) - UNK_PENALTY)
        self.alpha = float(alpha)
        self.types: List[tuple] = []  # per type: the arrays of _lattice
        self._flat = None

    def arcs(self, word: str):
        """(end, start, piece id, score) of every lattice arc of ``word``, by end then start."""
        arcs = []
        for i in range(len(word)):
            single = False
            for j in range(i + 1, min(i + self.max_len, len(word)) + 1):
                hit = self.vocab.get(word[i:j])
                if hit is not None:
                    arcs.append((j, i, hit[0], hit[1]))
                    single = single or j == i + 1
            if not single:
                arcs.append((i + 1, i, *self.unk))
        return sorted(arcs)

    def add(self, words: List[str], pieces=None) -> None:
        self.types.extend(self._lattice(w) for w in words)
        self._flat = None

    def _lattice(self, word):
        """Arcs (end, start, piece, cumulative probability of the arc among those ending at end:
        exp(forward[start] + alpha * score - forward[end]))."""
        arcs = self.arcs(word)
        forward = [0.0] + [-math.inf] * len(word)
        for end, start, _, score in arcs:  # by end: forward[start] is complete when used
            a, b = forward[end], forward[start] + self.alpha * score
            hi = max(a, b)
            forward[end] = hi + math.log(math.exp(a - hi) + math.exp(b - hi))
        cum, last_end, total = [], -1, 0.0
        for end, start, _, score in arcs:
            total = 0.0 if end != last_end else total
            total += math.exp(forward[start] + self.alpha * score - forward[end])
            cum.append(total)
            last_end = end
        ends = np.array([a[0] for a in arcs])
        cum = np.array(cum)
        cum[np.r_[ends[1:] != ends[:-1], True]] = 1.0  # each end's last arc: exactly 1
        starts = np.array([a[1] for a in arcs])
        return len(word) + 1, ends, starts, np.array([a[2] for a in arcs]), cum

    def ready(self) -> None:
        """The flat arrays, made now (before data-loader workers fork) rather than at a call."""
        if self._flat is None:
            self._flat = self._flatten()

    def _flatten(self):
        """Every type's arcs in flat arrays; an arc's cumulative probability is stored plus its
        end node's global number, so that one searchsorted draws the arcs of every word."""
        nodes = np.array([t[0] for t in self.types])
        offset = np.r_[0, np.cumsum(nodes)[:-1]]
        arcs = np.array([t[1].size for t in self.types])
        shift = np.repeat(offset, arcs)
        ends = np.concatenate([t[1] for t in self.types]) + shift
        starts = np.concatenate([t[2] for t in self.types]) + shift
        pieces = np.concatenate([t[3] for t in self.types])
        key = ends + np.concatenate([t[4] for t in self.types])
        return key, starts, pieces, offset, nodes - 1

    def sample(self, types: np.ndarray, draw: Callable):
        """One segmentation per word of type ``types[r]``: (r of each piece, piece id), in order.
        ``draw(rows, counters)`` gives a uniform per row for a counter below 2**32."""
        self.ready()
        key, starts, pieces, offset, length = self._flat
        node = offset[types] + length[types]
        first = offset[types]
        rows = np.arange(types.size)
        out_rows, out_steps, out_pieces, step = [], [], [], 0
        while rows.size:  # one piece of every unfinished word per step, right to left
            arc = np.searchsorted(key, node[rows] + draw(rows, step), side="right")
            out_rows.append(rows)
            out_steps.append(np.full(rows.size, step))
            out_pieces.append(pieces[arc])
            node[rows] = starts[arc]
            rows = rows[node[rows] != first[rows]]
            step += 1
        if not out_rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        rows, steps = np.concatenate(out_rows), np.concatenate(out_steps)
        order = np.lexsort((-steps, rows))
        return rows[order], np.concatenate(out_pieces)[order]
