"""Bigram statistics of a binarized fairseq split, cached next to the data.

The cache ``<split prefix>.noise_stats.npz`` (for example ``DATA/train.noise_stats.npz`` or
``DATA/train.en-de.en.noise_stats.npz``) holds the statistics and a key: a hash of the binarized
data files, of the dictionary's symbols and of the way bigrams are cut. A cache whose key does
not match (the data or the dictionary changed), or that cannot be read, is rebuilt; it is never
used silently. When the data directory is read-only the statistics are computed and not cached.
The names hold no dash: fairseq reads ``split.xx-yy.*`` file names as language pairs.
"""

import hashlib
import logging
import os
import tempfile
import zipfile
from typing import NamedTuple

import numpy as np

from .ngram_stats import STATS_FORMAT_VERSION, BigramStats, sentence_stats, stream_stats

logger = logging.getLogger(__name__)

MODES = ("stream", "sentences")


def cache_path(prefix: str) -> str:
    return prefix + ".noise_stats.npz"


class TokenSplit(NamedTuple):
    """A binarized split read once: its path prefix (the cache lies beside it), all its tokens
    (int64) and the sizes of its items."""

    prefix: str
    tokens: np.ndarray
    sizes: np.ndarray


def read_split(prefix: str, dataset) -> TokenSplit:
    """The :class:`TokenSplit` of ``dataset``, the indexed dataset loaded from ``prefix``."""
    return TokenSplit(prefix, *read_token_stream(dataset))


def read_token_stream(dataset):
    """All tokens of an indexed dataset as one int64 array, and the sizes of its items."""
    from .fairseq_compat import indexed_tokens  # here: the statistics cache needs no fairseq

    sizes = np.asarray(dataset.sizes, dtype=np.int64)
    tokens = indexed_tokens(dataset)  # fairseq's mmap format: one contiguous buffer
    if tokens is not None:
        return tokens, sizes
    if len(dataset) == 0:
        return np.zeros(0, dtype=np.int64), sizes
    return np.concatenate([dataset[i].numpy() for i in range(len(dataset))]).astype(np.int64), sizes


def _key(prefix: str, symbols, mode: str) -> str:
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"v{STATS_FORMAT_VERSION}:{mode}\n".encode())
    for suffix in (".idx", ".bin"):
        with open(prefix + suffix, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
    digest.update("\n".join(symbols).encode("utf-8"))
    return digest.hexdigest()


def _load(path: str, key: str):
    """The cached statistics, or None (with the reason logged) when they cannot be used."""
    if not os.path.exists(path):
        return None
    try:
        arrays = np.load(path, allow_pickle=False)
        if not isinstance(arrays, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with arrays:
            if str(arrays["key"]) != key:
                logger.warning(
                    f"noise statistics cache {path} was built for other data or another "
                    "dictionary; rebuilding it"
                )
                return None
            return BigramStats.from_arrays({name: arrays[name] for name in arrays.files})
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        logger.warning(f"noise statistics cache {path} is unreadable ({e}); rebuilding it")
        return None


def _save(path: str, key: str, stats: BigramStats) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".noise_stats.", suffix=".npz", dir=directory)
    except OSError as e:
        logger.warning(f"cannot cache noise statistics in {directory} ({e}); not caching them")
        return
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, key=np.array(key), **stats.to_arrays())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; give it normal rights
        os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
    except OSError as e:
        logger.warning(f"cannot write noise statistics cache {path} ({e}); not caching it")
        if os.path.exists(tmp):
            os.remove(tmp)


def load_or_build_stats(split: TokenSplit, dictionary, mode: str, use_cache: bool = True):
    """Statistics of the binarized ``split`` (:func:`read_split`) over ``len(dictionary)`` ids.

    ``mode`` is ``"stream"`` (language modeling: bigrams across line ends) or ``"sentences"``
    (translation: bigrams inside each sentence).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    vocab_size = len(dictionary)
    key = _key(split.prefix, dictionary.symbols, mode)
    path = cache_path(split.prefix)
    if use_cache:
        stats = _load(path, key)
        if stats is not None and stats.vocab_size == vocab_size:
            logger.info(f"loaded noise statistics from {path}")
            return stats
    if mode == "stream":
        stats = stream_stats(split.tokens, vocab_size)
    else:
        stats = sentence_stats(split.tokens, split.sizes, vocab_size)
    logger.info(f"computed noise statistics of {split.prefix} ({split.tokens.size} tokens)")
    if use_cache:
        _save(path, key, stats)
    return stats
