"""Subword regularisation on the fly: a new segmentation of every training sentence each epoch.

Unigram sampling (Kudo, 2018) and BPE-dropout (Provilkov et al., 2020) from a sentencepiece model,
applied to data binarized once with that model's vocabulary, seeded by (seed, epoch, example id)
as the noising is. numpy and sentencepiece only; docs/subword_sampling.md explains it.
"""

from .model import SubwordModel
from .sampler import SubwordSampler

__all__ = ["SubwordModel", "SubwordSampler"]
