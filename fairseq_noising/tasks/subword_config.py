"""What both noised tasks share for subword sampling: the flags, their checks, building samplers."""

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import FairseqDataclass

from ..errors import NoisingError
from ..noiser_factory import BLANK_SYMBOL
from ..subword import SubwordModel, SubwordSampler
from ..subword.model import BPE

logger = logging.getLogger(__name__)


@dataclass
class SubwordSamplingConfig(FairseqDataclass):
    subword_sampling_alpha: float = field(
        default=0.0,
        metadata={
            "help": "a new sentencepiece segmentation of every training sentence each epoch "
            "(0: off): for a unigram model the exponent alpha (p(segmentation) ∝ "
            "p(pieces)^alpha, >= 0), for a BPE model the probability that a merge is dropped, "
            "in [0, 1] (BPE-dropout); applied before --noise-scheme"
        },
    )
    subword_sampling_nbest: int = field(
        default=-1,
        metadata={
            "help": "unigram models: sample from every segmentation (-1) or from the N best "
            "segmentations of each sentence (N >= 1)"
        },
    )
    subword_model: Optional[str] = field(
        default=None,
        metadata={
            "help": "the sentencepiece model the data was binarized with ('{lang}' stands for "
            "the language); default DATA/spm.{lang}.model, else DATA/spm.joint.model "
            "(translation), DATA/spm.model (language modeling)"
        },
    )


def alpha_of(cfg) -> float:
    """--subword-sampling-alpha (0 in the config of a checkpoint written before the flag)."""
    return float(getattr(cfg, "subword_sampling_alpha", None) or 0.0)


def check_flags(cfg) -> None:
    """The flags' ranges that do not depend on the model."""
    alpha = alpha_of(cfg)
    if not (math.isfinite(alpha) and alpha >= 0):
        raise NoisingError(
            f"--subword-sampling-alpha must be >= 0 (0: off; at most 1 for a BPE model), got "
            f"{cfg.subword_sampling_alpha}"
        )
    nbest = int(getattr(cfg, "subword_sampling_nbest", -1))
    if nbest == 0 or nbest < -1:
        raise NoisingError(
            f"--subword-sampling-nbest must be -1 (every segmentation) or >= 1, got {nbest}"
        )


def model_path(cfg, data_dir: str, lang: Optional[str] = None) -> str:
    """--subword-model (its ``{lang}`` filled in), else the model beside the data."""
    if cfg.subword_model:
        return cfg.subword_model.replace("{lang}", lang or "")
    names = [f"spm.{lang}.model", "spm.joint.model"] if lang else ["spm.model"]
    paths = [os.path.join(data_dir, name) for name in names]
    for path in paths:
        if os.path.isfile(path):
            return path
    raise NoisingError(
        f"--subword-sampling-alpha needs the sentencepiece model the data was binarized with: "
        f"no {' or '.join(paths)} (pass --subword-model)"
    )


def build_sampler(cfg, data_dir, dictionary, split, side: int, lang: Optional[str] = None):
    """A :class:`SubwordSampler` for one side, checked against its dictionary, holding what it
    needs of its training ``split`` (a :class:`~fairseq_noising.stats_cache.TokenSplit`: word
    lattices, or the n best of each sentence)."""
    path = model_path(cfg, data_dir, lang)
    model = SubwordModel(path)
    alpha, nbest = float(cfg.subword_sampling_alpha), int(cfg.subword_sampling_nbest)
    if model.model_type == BPE and alpha > 1:
        raise NoisingError(
            f"--subword-sampling-alpha is the merge dropout probability of the BPE model {path}: "
            f"it must lie in [0, 1], got {alpha}"
        )
    if model.model_type == BPE and nbest != -1:
        raise NoisingError(f"--subword-sampling-nbest applies to unigram models; {path} is BPE")
    dict_path = os.path.join(data_dir, f"dict.{lang}.txt" if lang else "dict.txt")
    reserved = list(range(dictionary.nspecial)) + [dictionary.index(BLANK_SYMBOL)]
    tables = model.map_dictionary(dictionary.symbols, reserved, dictionary.unk(), dict_path)
    sampler = SubwordSampler(model, *tables, alpha=alpha, nbest=nbest, seed=cfg.seed, side=side)
    how = f"the {nbest} best of each sentence" if nbest >= 1 else "every segmentation"
    how = "BPE-dropout" if model.model_type == BPE else how
    units = "sentences (runs of words)" if nbest >= 1 and model.model_type != BPE else "words"
    count = sampler.prepare(split.tokens, split.sizes)
    logger.info(
        f"subword sampling with {path} ({model.kind}, {how}), alpha={alpha}: the training "
        f"split's {count} distinct {units} prepared"
    )
    return sampler
