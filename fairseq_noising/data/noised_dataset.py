"""A dataset wrapper that resamples and noises every training batch, online and deterministically."""

import logging

import numpy as np
from fairseq.data import BaseWrapperDataset, LanguagePairDataset, data_utils

from ..fairseq_compat import batching
from .batch_noising import (
    noise_lm_batch,
    noise_translation_batch,
    resample_samples,
    sampled_lengths,
)

logger = logging.getLogger(__name__)


class NoisedDataset(BaseWrapperDataset):
    """Wraps a language-modeling or translation dataset; its :meth:`collater` gives each example
    a new segmentation (subword sampling), collates, then noises the batch.

    Both are pure functions of the seed, the epoch (from :meth:`set_epoch`), the example ids
    and the positions inside each example (see :mod:`fairseq_noising.noiser`), so every epoch
    sees fresh noise and the same command gives identical batches whatever the number of
    workers, the distributed rank or a resume from a checkpoint. With subword sampling, the
    batches are formed from the lengths the examples have in the epoch (:meth:`set_epoch` draws
    them; fairseq forms each epoch's batches after it), so that a batch holds examples of like
    sampled length; ``filter_indices_by_size`` keeps the binarized ones.

    Args:
        dataset: the clean dataset: a ``LanguagePairDataset`` (translation), else a language
            model's (``MonolingualDataset``, stateful BPTT blocks).
        pad: the padding index.
        noisers: ``{"source"|"target": Noiser}``, the sides noised (a language model's noiser,
            of its (src_tokens, target) pairs, is ``"target"``); None for none.
        samplers: ``{"source"|"target": SubwordSampler}``, the sides resampled, keyed alike.
    """

    def __init__(self, dataset, pad, noisers=None, samplers=None):
        super().__init__(dataset)
        self.layout = "translation" if isinstance(dataset, LanguagePairDataset) else "lm"
        self.pad = pad
        self.noisers = {side: n for side, n in (noisers or {}).items() if n is not None}
        self.samplers = samplers or {}
        self.epoch = 1
        self.lengths = None  # fairseq_compat.batching's lengths in epoch self.lengths_epoch
        self.lengths_epoch = None

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        # fairseq keeps data-loader workers alive across epochs when the iterator is reused;
        # their copy of this wrapper would keep the first epoch. A new iterator per epoch carries
        # the current epoch into the workers.
        return False

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self.epoch = epoch
        if self.samplers and batching.kind(self.dataset) and self.lengths_epoch != epoch:
            base = batching.binarized(self.dataset)  # fairseq sets an epoch more than once
            self.lengths = sampled_lengths(self.dataset, self.samplers, epoch, base)
            self.lengths_epoch = epoch

    # batching by this epoch's lengths (fairseq_compat.batching), else as the wrapped dataset
    @property
    def sizes(self):
        return self.dataset.sizes if self.lengths is None else batching.sizes(self.lengths)

    def num_tokens(self, index):
        if self.lengths is None:
            return self.dataset.num_tokens(index)
        return int(batching.num_tokens_vec(self.lengths, np.array([index]))[0])

    def num_tokens_vec(self, indices):
        if self.lengths is None:
            return self.dataset.num_tokens_vec(indices)
        return batching.num_tokens_vec(self.lengths, indices)

    def size(self, index):
        if self.lengths is None:
            return self.dataset.size(index)
        return batching.size(self.lengths, index)

    def batch_by_size(self, indices, max_tokens=None, **kwargs):
        if self.lengths is None:  # BaseWrapperDataset's: the wrapped dataset's own sizes
            return self.dataset.batch_by_size(indices, max_tokens=max_tokens, **kwargs)
        # a sentence that sampling made longer than --max-tokens goes into a batch of its own
        # (fairseq refuses a length over the budget; the binarized lengths were checked)
        tokens = self.num_tokens_vec(indices)
        tokens = np.minimum(tokens, max_tokens) if max_tokens else tokens
        return data_utils.batch_by_size(
            indices, self.num_tokens, num_tokens_vec=tokens, max_tokens=max_tokens, **kwargs
        )

    def ordered_indices(self):
        if self.lengths is None:
            return self.dataset.ordered_indices()
        return batching.ordered_indices(self.lengths, self.dataset.shuffle)

    def noise_batch(self, batch, epoch=None):
        """The noised copy of a clean collated ``batch`` and the per-side noise details."""
        epoch = self.epoch if epoch is None else epoch
        source, target = self.noisers.get("source"), self.noisers.get("target")
        if self.layout == "lm":
            return noise_lm_batch(batch, target, epoch, self.pad)
        return noise_translation_batch(batch, source, target, epoch, self.pad)

    def collater(self, samples):
        samples = resample_samples(samples, self.samplers, self.layout, self.epoch)
        return self.noise_batch(self.dataset.collater(samples))[0]
