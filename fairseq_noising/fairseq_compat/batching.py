"""How fairseq's ``LanguagePairDataset`` sizes and orders its examples for batching, over other
lengths: those of a wrapper whose examples change length every epoch (subword sampling), so that
its batches are formed from the lengths the examples have in that epoch.

Mirrors ``ordered_indices`` (a permutation drawn under the caller's ``numpy_seed(seed + epoch)``
when the dataset shuffles, then stable sorts by target and then source length), ``num_tokens_vec``
(the longer side) and ``size`` (both sides) of fairseq/data/language_pair_dataset.py. Its
``buckets`` (``--num-batch-buckets``) pad to fixed lengths computed once from the binarized sizes:
with them, :func:`mirrors` is False and the binarized lengths are kept.
"""

import numpy as np
from fairseq.data import LanguagePairDataset


def mirrors(dataset) -> bool:
    """Whether ``dataset`` batches as the functions below do."""
    return isinstance(dataset, LanguagePairDataset) and getattr(dataset, "buckets", None) is None


def ordered_indices(src_sizes, tgt_sizes, shuffle: bool) -> np.ndarray:
    n = len(src_sizes)
    indices = np.random.permutation(n).astype(np.int64) if shuffle else np.arange(n, dtype=np.int64)
    if tgt_sizes is not None:
        indices = indices[np.argsort(tgt_sizes[indices], kind="mergesort")]
    return indices[np.argsort(src_sizes[indices], kind="mergesort")]


def num_tokens_vec(src_sizes, tgt_sizes, indices) -> np.ndarray:
    sizes = src_sizes[indices]
    return sizes if tgt_sizes is None else np.maximum(sizes, tgt_sizes[indices])


def size(src_sizes, tgt_sizes, index):
    return src_sizes[index], tgt_sizes[index] if tgt_sizes is not None else 0
