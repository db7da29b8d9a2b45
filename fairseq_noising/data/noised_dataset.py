"""A dataset wrapper that resamples and noises every training batch, online and deterministically."""

import logging

from fairseq.data import BaseWrapperDataset

from .batch_noising import noise_lm_batch, noise_translation_batch, resample_samples

logger = logging.getLogger(__name__)


class NoisedDataset(BaseWrapperDataset):
    """Wraps a language-modeling or translation dataset; its :meth:`collater` gives each example
    a new segmentation (subword sampling), collates, then noises the batch.

    Both are pure functions of the seed, the epoch (from :meth:`set_epoch`), the example ids
    and the positions inside each example (see :mod:`fairseq_noising.noiser`), so every epoch
    sees fresh noise and the same command gives identical batches whatever the number of
    workers, the distributed rank or a resume from a checkpoint.

    Args:
        dataset: the clean dataset (``MonolingualDataset`` or ``LanguagePairDataset``).
        layout: ``"lm"`` or ``"translation"``.
        pad: the padding index.
        noiser: for ``"lm"``, the noiser of (src_tokens, target); may be None.
        source_noiser, target_noiser: for ``"translation"``, either may be None (side not noised).
        samplers: ``{"source"|"target": SubwordSampler}``, the sides resampled (``"target"``
            for ``"lm"``); None for none.
    """

    def __init__(
        self,
        dataset,
        layout,
        pad,
        noiser=None,
        source_noiser=None,
        target_noiser=None,
        samplers=None,
    ):
        super().__init__(dataset)
        if layout not in ("lm", "translation"):
            raise ValueError(f"layout must be 'lm' or 'translation', got {layout!r}")
        self.layout = layout
        self.pad = pad
        self.noiser = noiser
        self.source_noiser = source_noiser
        self.target_noiser = target_noiser
        self.samplers = samplers or {}
        self.epoch = 1

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        # fairseq keeps data-loader workers alive across epochs when the iterator is reused;
        # their copy of this wrapper would keep the first epoch. A new iterator per epoch carries
        # the current epoch into the workers.
        return False

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self.epoch = epoch

    def noise_batch(self, batch, epoch=None):
        """The noised copy of a clean collated ``batch`` and the per-side noise details."""
        epoch = self.epoch if epoch is None else epoch
        if self.layout == "lm":
            return noise_lm_batch(batch, self.noiser, epoch, self.pad)
        return noise_translation_batch(
            batch, self.source_noiser, self.target_noiser, epoch, self.pad
        )

    def collater(self, samples):
        samples = resample_samples(samples, self.samplers, self.layout, self.epoch)
        return self.noise_batch(self.dataset.collater(samples))[0]
