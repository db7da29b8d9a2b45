"""A new segmentation of binarized sentences, a pure function of (seed, epoch, example id).

A sentence's dictionary ids are cut into units: a word (a piece that starts with ``▁`` and the
pieces that follow it), or with ``nbest >= 1`` a segment (a run of whole words), and tokens that
are no ordinary piece (``</s>``, ``<unk>``, ``<blank>``), which stay as they are. No piece
crosses a word, so resampling each word on its own samples the sentence. Words are keyed by a
hash of their ids and looked up in a table of word types that grows when an unseen word comes;
the sampling itself is vectorised over all words of a call.
"""

from typing import List, Sequence

import numpy as np

from ..noiser import _mix, position_hashes
from .bpe import BPEDropoutSampler
from .flat import ranges
from .model import BPE, NORMAL, WORD_START, SubwordModel
from .nbest import NBestSampler
from .unigram import UnigramSampler

SIDE_OFFSET = 2  # the sampler of side s hashes with the noiser's key 2 + s (its own stream)
_K1, _K2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)


class SubwordSampler:
    """Resamples the segmentation of sequences of dictionary ids (``to_piece``/``to_dict``: the
    tables of :meth:`SubwordModel.map_dictionary`): unigram sampling with ``alpha`` and
    ``nbest``, or BPE-dropout with probability ``alpha``."""

    def __init__(self, model: SubwordModel, to_piece, to_dict, alpha, nbest=-1, seed=1, side=0):
        self.to_dict = np.asarray(to_dict, dtype=np.int64)
        self.to_piece = np.asarray(to_piece, dtype=np.int64)
        mapped = self.to_piece >= 0
        self.resamplable = mapped & (model.kinds[np.maximum(self.to_piece, 0)] == NORMAL)
        self.strings = [model.pieces[p] if p >= 0 else "" for p in self.to_piece]
        self.word_start = np.array([s.startswith(WORD_START) for s in self.strings], dtype=bool)
        self.by_word = model.model_type == BPE or nbest < 1
        if model.model_type == BPE:
            self.method = BPEDropoutSampler(model, alpha)
        elif nbest < 1:
            self.method = UnigramSampler(model, alpha)
        else:
            self.method = NBestSampler(model, alpha, nbest)
        self.seed, self.side = int(seed), SIDE_OFFSET + int(side)
        self.keys = np.zeros(0, dtype=np.uint64)  # sorted unit keys, and the type of each
        self.key_types = np.zeros(0, dtype=np.int64)
        self.count = 0

    def _units(self, flat: np.ndarray, lengths: np.ndarray):
        """Where each unit starts, its length, and whether it is resampled. Segments (``nbest``)
        are resampled from their text, which makes a word of their first piece: a run that does
        not start a word (after ``<unk>``, at the start of a block) keeps its leading part."""
        ok, word_start = self.resamplable[flat], self.word_start[flat]
        begin = ~ok
        begin[1:] |= ~ok[:-1]
        begin[(np.cumsum(lengths) - lengths)[lengths > 0]] = True
        if self.by_word:
            begin |= word_start
        else:
            segment = np.cumsum(begin) - 1
            inside = np.flatnonzero(ok & word_start & ~begin)
            inside = inside[~word_start[np.flatnonzero(begin)][segment[inside]]]
            begin[inside[np.unique(segment[inside], return_index=True)[1]]] = True
        start = np.flatnonzero(begin)
        resampled = ok[start] & (self.by_word | word_start[start])
        return start, np.diff(np.r_[start, flat.size]), resampled

    def _types(self, flat, start, length, units, add=True):
        """The type of each unit of ``units`` (-1: not seen before), adding the unseen ones
        first when ``add``; their strings and model ids too."""
        within = (np.arange(flat.size) - np.repeat(start, length)).astype(np.uint64)
        with np.errstate(over="ignore"):
            per_token = _mix(flat.astype(np.uint64) * _K1 + within * _K2)
            keys = _mix(np.add.reduceat(per_token, start)[units] ^ length[units].astype(np.uint64))
        where = np.minimum(np.searchsorted(self.keys, keys), max(self.keys.size - 1, 0))
        seen = self.keys[where] == keys if self.keys.size else np.zeros(keys.size, dtype=bool)
        new_keys, first = np.unique(keys[~seen], return_index=True)
        new = units[np.flatnonzero(~seen)[first]] if add else units[~seen]
        pieces = [self.to_piece[flat[s : s + n]] for s, n in zip(start[new], length[new])]
        strings = [
            "".join(self.strings[t] for t in flat[s : s + n])
            for s, n in zip(start[new], length[new])
        ]
        if add and new.size:
            self.method.add(strings, pieces)
            keys_all = np.concatenate([self.keys, new_keys])
            order = np.argsort(keys_all, kind="stable")
            self.keys = keys_all[order]
            types = np.arange(self.count, self.count + new.size)
            self.key_types = np.concatenate([self.key_types, types])[order]
            self.count += new.size
            where, seen = np.searchsorted(self.keys, keys), np.ones(keys.size, dtype=bool)
        return np.where(seen, self.key_types[where] if self.keys.size else -1, -1), strings, pieces

    def prepare(self, tokens: np.ndarray, sizes: np.ndarray) -> int:
        """Adds the units of a whole split (``tokens``, cut into ``sizes``) at once, so that the
        calls during training find every one; the number of types."""
        flat, sizes = np.asarray(tokens, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
        if flat.size:
            start, length, is_unit = self._units(flat, sizes)
            self._types(flat, start, length, np.flatnonzero(is_unit))
        self.method.ready()
        return self.count

    def __call__(self, sequences: Sequence, ids: Sequence[int], epoch: int) -> List[np.ndarray]:
        """The resampled copy of each sequence of dictionary ids (example ``ids[i]``)."""
        lengths = np.array([len(s) for s in sequences], dtype=np.int64)
        if not lengths.sum():
            return [np.asarray(s, dtype=np.int64).copy() for s in sequences]
        flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences])
        start, length, is_word = self._units(flat, lengths)
        unit_seq = np.repeat(np.arange(lengths.size), lengths)[start]
        first_unit = np.searchsorted(start, np.cumsum(lengths) - lengths)
        unit_index = np.arange(start.size) - first_unit[unit_seq]  # the unit's place in its example
        words = np.flatnonzero(is_word)
        example = np.asarray(ids, dtype=np.int64)[unit_seq[words]]
        counters = unit_index[words] << 32

        def draw(rows, local):
            where = (counters[rows] | local)[:, None]
            hashes = position_hashes(self.seed, epoch, example[rows], where, self.side)[:, 0]
            return (hashes >> np.uint64(11)) * (1.0 / 2.0**53)

        # word types grow as words come; the n best are listed at once for a split (prepare)
        types, strings, new_pieces = self._types(flat, start, length, words, add=self.by_word)
        known = np.flatnonzero(types >= 0)
        rows, pieces = self.method.sample(types[known], lambda r, local: draw(known[r], local))
        rows = known[rows]
        if known.size < types.size:  # segments not listed before: listed for this call alone
            new = np.flatnonzero(types < 0)
            more = self.method.sample_new(strings, new_pieces, lambda r, local: draw(new[r], local))
            rows, pieces = np.r_[rows, new[more[0]]], np.r_[pieces, more[1]]
        fixed = np.flatnonzero(~is_word)
        owner = np.concatenate([words[rows], np.repeat(fixed, length[fixed])])
        tokens = np.concatenate([self.to_dict[pieces], flat[ranges(start[fixed], length[fixed])]])
        tokens = tokens[np.argsort(owner, kind="stable")]
        counts = np.bincount(unit_seq[owner], minlength=lengths.size)
        return np.split(tokens, np.cumsum(counts)[:-1])
