"""Let torch's safe (``weights_only=True``) loader read fairseq checkpoints.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True``: it only rebuilds tensors,
containers and primitives, plus whatever globals were explicitly allow-listed with
``torch.serialization.add_safe_globals``. fairseq 0.12 calls ``torch.load(f, map_location=...)``
without ``weights_only`` (``fairseq/checkpoint_utils.py::load_checkpoint_to_cpu``), so stock
``fairseq-generate``, ``fairseq-eval-lm`` and resuming from ``checkpoint_last.pt`` fail on the
checkpoints fairseq itself writes.

Rather than turning the check off, this module allow-lists the few non-tensor Python objects that
the fairseq trainer actually writes. They were found empirically, by running
``torch.serialization.get_unsafe_globals_in_checkpoint`` (plus a real ``torch.load``, since that
function misses the dtype classes that numpy's pickles BUILD) over checkpoints from ``lstm_lm``,
``transformer_lm`` and ``lstm`` translation runs with the sgd/adam/nag/adafactor optimizers,
fixed/inverse_sqrt/reduce_lr_on_plateau/cosine/tri_stage schedulers, EMA, ``--update-freq``,
``--save-interval-updates``, ``--keep-best-checkpoints``, ``fairseq-hydra-train`` and
``--eval-bleu``:

* ``argparse.Namespace``: ``cfg["model"]`` (and the other ``cfg`` groups) of models registered
  with argparse-style ``register_model_architecture`` (``lstm``, ``lstm_lm``, ...), and the
  top-level ``args`` of pre-hydra checkpoints.
* numpy arrays: ``extra_state["metrics"]`` holds the state of every logged meter;
  ``--eval-bleu`` logs ``_bleu_counts``/``_bleu_totals`` as ``np.ndarray`` of int64. An array
  pickles as ``numpy.(_)core.multiarray._reconstruct`` + ``numpy.ndarray`` + ``numpy.dtype``, and
  (numpy >= 1.25) the dtype instance is of a concrete class such as ``numpy.dtypes.Int64DType``
  that must be allow-listed too. Only plain numeric/bool dtype classes are listed, so object
  arrays (which could smuggle arbitrary objects) are still refused.
* numpy scalars (``numpy.(_)core.multiarray.scalar``): fairseq's meters accept numpy numbers and
  ``safe_round`` keeps them numpy, so any metric logged as a numpy scalar ends up in the meters
  state and, if it is the ``--best-checkpoint-metric``, in ``val_loss``/``best`` and the
  ``reduce_lr_on_plateau`` state.

Everything else fairseq writes is tensors, dicts/lists/tuples, ``OrderedDict`` and primitives
(``cfg`` is saved via ``OmegaConf.to_container(..., enum_to_str=True)``; meters are stored as
``(priority, name, class-name string, state dict)``), which torch already accepts.

numpy 2 renamed ``numpy.core`` to ``numpy._core`` and pickles record the module path of the
writing version, so the numpy functions are registered under both names (on torch >= 2.6, whose
allow-list accepts ``(object, "module.name")`` pairs): checkpoints written under numpy 1.x load
under numpy 2.x and vice versa.
"""

import argparse

import numpy as np
import torch

__all__ = ["allow_fairseq_checkpoints"]

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
