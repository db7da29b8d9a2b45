"""How fairseq's ``LanguagePairDataset`` and ``MonolingualDataset`` size and order their examples
for batching, over the lengths a subword-sampling wrapper's examples have in the epoch
(docs/subword_sampling.md). ``lengths``: ``{"source", "target": one length an example}``,
``"source"`` for pairs only.

It mirrors their ``ordered_indices``, ``num_tokens_vec``, ``size`` and ``sizes``; with fixed pad
lengths (``--num-batch-buckets``, ``fixed_pad_length``) :func:`kind` is None and the binarized
lengths are kept.
"""

import numpy as np
from fairseq.data import LanguagePairDataset, MonolingualDataset


def kind(dataset):
    """``"pair"`` or ``"mono"`` where ``dataset`` batches as the functions below do, else None."""
    if isinstance(dataset, LanguagePairDataset) and getattr(dataset, "buckets", None) is None:
        return "pair"
    if isinstance(dataset, MonolingualDataset) and not getattr(dataset, "fixed_pad_length", None):
        return "mono"
    return None


def _each(lengths):
    return lengths.get("source"), lengths["target"]


def ordered_indices(lengths, shuffle: bool) -> np.ndarray:
    src, tgt = _each(lengths)
    n = len(tgt if src is None else src)
    indices = np.random.permutation(n).astype(np.int64) if shuffle else np.arange(n, dtype=np.int64)
    if src is None:
        return np.lexsort([indices, tgt])
    if tgt is not None:
        indices = indices[np.argsort(tgt[indices], kind="mergesort")]
    return indices[np.argsort(src[indices], kind="mergesort")]


def num_tokens_vec(lengths, indices) -> np.ndarray:
    src, tgt = _each(lengths)
    if src is None:
        return tgt[indices]
    return src[indices] if tgt is None else np.maximum(src[indices], tgt[indices])


def size(lengths, index):
    src, tgt = _each(lengths)
    if src is None:
        return tgt[index]
    return src[index], tgt[index] if tgt is not None else 0


def sizes(lengths):
    src, tgt = _each(lengths)
    if src is None:
        return tgt
    return src if tgt is None else np.vstack((src, tgt)).T


def binarized(dataset) -> dict:
    """The ``lengths`` ``dataset`` batches by itself (its ``kind`` is not None)."""
    if kind(dataset) == "pair":
        return {"source": dataset.src_sizes, "target": dataset.tgt_sizes}
    return {"target": dataset.sizes}
