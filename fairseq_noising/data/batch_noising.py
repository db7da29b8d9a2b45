"""Where the context and the targets sit in fairseq's collated batches, and noising them there.

- Language modeling (``MonolingualDataset``): position j pairs ``net_input.src_tokens[:, j]``
  (context) with ``target[:, j]``.
- Translation (``LanguagePairDataset``): the source sentence ``net_input.src_tokens`` is noised as
  context only (source side); on the target side position k pairs
  ``net_input.prev_output_tokens[:, k]`` (context) with ``target[:, k]``. The leading end of
  sentence of ``prev_output_tokens`` is special and never noised.

The noising functions return a new batch (the input batch is not modified) and the noise
details. Subword sampling (:func:`resample_samples`) works on the examples before collation.
"""

from typing import Dict, Optional

import numpy as np
import torch

from ..noiser import NoisedTokens, Noiser, positions_in_example


def _noise(noiser: Noiser, context: torch.Tensor, target: Optional[torch.Tensor], ids, epoch, pad):
    context_np = context.numpy()
    target_np = None if target is None else target.numpy()
    positions = positions_in_example(context_np, pad)
    return noiser(context_np, target_np, ids.numpy(), positions, epoch)


def _with_net_input(batch: dict) -> dict:
    out = dict(batch)
    out["net_input"] = dict(batch["net_input"])
    return out


def resample_samples(samples, samplers: dict, layout: str, epoch: int):
    """Copies of ``samples`` (examples before collation) with a new segmentation of the sides
    that have a sampler. A language-modeling example's source is its target shifted right by
    one (``MonolingualDataset``'s ``future`` target): it is rebuilt from the resampled target."""
    if not samples or not samplers:
        return samples
    ids = np.array([s["id"] for s in samples], dtype=np.int64)
    out = [dict(s) for s in samples]
    for side, sampler in samplers.items():
        key = "source" if side == "source" else "target"
        for o, s, new in zip(out, samples, sampler([s[key].numpy() for s in samples], ids, epoch)):
            o[key] = torch.from_numpy(new)
            if layout == "lm":
                o["source"] = torch.cat([s["source"][:1], o["target"][:-1]])
    return out


def sampled_lengths(dataset, samplers: dict, epoch: int, lengths: dict, chunk=4096) -> dict:
    """``lengths`` (``{"source"|"target": each example's binarized length}``) with the sides that
    have a sampler in ``epoch``'s segmentation, as :func:`resample_samples` makes them (a
    language-model example: its target), drawn ``chunk`` examples at a time."""
    lengths = dict(lengths)
    for side, sampler in samplers.items():
        lengths[side] = np.zeros(len(dataset), dtype=np.int64)
        for start in range(0, len(dataset), chunk):
            ids = np.arange(start, min(start + chunk, len(dataset)))
            sequences = sampler([dataset[i][side].numpy() for i in ids], ids, epoch)
            lengths[side][ids] = [len(s) for s in sequences]
    return lengths


def noise_lm_batch(batch: dict, noiser: Optional[Noiser], epoch: int, pad: int):
    """Noised copy of a language-modeling batch, and ``{"target": NoisedTokens}``."""
    if noiser is None or not batch or "net_input" not in batch:
        return batch, {}
    result = _noise(
        noiser, batch["net_input"]["src_tokens"], batch["target"], batch["id"], epoch, pad
    )
    out = _with_net_input(batch)
    out["net_input"]["src_tokens"] = torch.from_numpy(result.context)
    out["target"] = torch.from_numpy(result.target)
    return out, {"target": result}


def noise_translation_batch(
    batch: dict,
    source_noiser: Optional[Noiser],
    target_noiser: Optional[Noiser],
    epoch: int,
    pad: int,
):
    """Noised copy of a translation batch, and ``{"source": ..., "target": NoisedTokens}``."""
    if not batch or "net_input" not in batch:
        return batch, {}
    out = _with_net_input(batch)
    details: Dict[str, NoisedTokens] = {}
    if source_noiser is not None:
        result = _noise(
            source_noiser, batch["net_input"]["src_tokens"], None, batch["id"], epoch, pad
        )
        out["net_input"]["src_tokens"] = torch.from_numpy(result.context)
        details["source"] = result
    if target_noiser is not None and batch.get("target") is not None:
        result = _noise(
            target_noiser,
            batch["net_input"]["prev_output_tokens"],
            batch["target"],
            batch["id"],
            epoch,
            pad,
        )
        out["net_input"]["prev_output_tokens"] = torch.from_numpy(result.context)
        out["target"] = torch.from_numpy(result.target)
        details["target"] = result
    return out, details
