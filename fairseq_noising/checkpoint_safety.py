"""Let torch's safe (``weights_only=True``) loader read fairseq checkpoints.

The few non-tensor objects fairseq writes are allow-listed, nothing more; what they are, how they
were found, and why numpy's functions are listed under two module names: docs/checkpoints.md.
"""

import argparse

import numpy as np
import torch

__all__ = ["allow_fairseq_checkpoints", "read_checkpoint"]

_REGISTERED = None

# numpy dtype codes whose dtype classes may be rebuilt: bool, signed/unsigned ints, floats.
_PLAIN_DTYPE_CODES = "?bBhHiIlLqQefd"


def _numpy_multiarray():
    """The module holding ``_reconstruct``/``scalar``, without touching the deprecated alias."""
    if int(np.__version__.split(".")[0]) >= 2:
        from numpy._core import multiarray
    else:  # numpy 1.x
        from numpy.core import multiarray
    return multiarray


def _torch_accepts_named_entries():
    # ``add_safe_globals([(obj, "full.path")])`` is understood from torch 2.6 on; older versions
    # would choke on the tuple at load time, so only plain objects are registered there.
    try:
        return torch.__version__ >= "2.6"
    except Exception:  # pragma: no cover - exotic version strings
        return False


def _safe_globals():
    multiarray = _numpy_multiarray()
    entries = [
        # legacy (argparse) model configs and pre-hydra ``args``
        argparse.Namespace,
        # numpy arrays in meters state (e.g. --eval-bleu counts)
        np.ndarray,
        np.dtype,
    ]
    # concrete dtype classes (numpy.dtypes.Int64DType, ...); plain np.dtype on numpy < 1.20
    entries.extend(
        sorted({type(np.dtype(code)) for code in _PLAIN_DTYPE_CODES} - {np.dtype}, key=str)
    )
    for fn_name in ("_reconstruct", "scalar"):  # array / numpy-scalar reconstruction
        fn = getattr(multiarray, fn_name)
        if _torch_accepts_named_entries():
            entries.append((fn, "numpy.core.multiarray." + fn_name))  # written by numpy 1.x
            entries.append((fn, "numpy._core.multiarray." + fn_name))  # written by numpy 2.x
        else:
            entries.append(fn)
    return entries


def allow_fairseq_checkpoints():
    """Allow-list what fairseq checkpoints contain for ``torch.load(weights_only=True)``.

    Idempotent and cheap (runs once per process). Returns the list of registered entries, or an
    empty list on torch versions without ``torch.serialization.add_safe_globals`` (< 2.4, where
    ``torch.load`` does not default to the safe loader anyway).
    """
    global _REGISTERED
    if _REGISTERED is not None:
        return list(_REGISTERED)
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is None:
        _REGISTERED = []
        return []
    entries = _safe_globals()
    add_safe_globals(entries)
    _REGISTERED = entries
    return list(entries)


def read_checkpoint(path: str) -> dict:
    """The fairseq checkpoint at ``path``, read with torch's safe loader, its tensors
    memory-mapped (only those used are read from disk); torch's error where it cannot be."""
    allow_fairseq_checkpoints()
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
