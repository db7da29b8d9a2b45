"""``noised_translation``: fairseq's ``translation`` with data noising in training."""

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq import utils
from fairseq.data import data_utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..data.noised_dataset import NoisedDataset
from ..errors import NoisingError
from ..fairseq_compat import every_example, workers_end_with_their_epoch
from ..noiser_factory import SIDES, add_blank, noised_sides, task_noiser
from ..schemes import check_gamma
from . import noising_config as noising
from . import precision
from . import subword_config as subword

logger = logging.getLogger(__name__)

NOISE_SIDE_CHOICES = ChoiceEnum(["both", "source", "target"])

# the numbers that keep the source's and the target's random streams apart
TARGET_SIDE, SOURCE_SIDE = SIDES["target"], SIDES["source"]


@dataclass
class NoisedTranslationConfig(
    TranslationConfig,
    noising.NoisingConfig,
    subword.SubwordSamplingConfig,
    precision.PrecisionConfig,
):
    noise_side: NOISE_SIDE_CHOICES = field(
        default="both",
        metadata={"help": "which side to noise: both, source (encoder input) or target (decoder)"},
    )
    noise_gamma_source: Optional[float] = field(
        default=None, metadata={"help": "gamma_0 for the source side (default: --noise-gamma)"}
    )
    noise_gamma_target: Optional[float] = field(
        default=None, metadata={"help": "gamma_0 for the target side (default: --noise-gamma)"}
    )
    subword_sampling_side: NOISE_SIDE_CHOICES = field(
        default="both",
        metadata={"help": "which side --subword-sampling-alpha resamples: both, source or target"},
    )


@register_task("noised_translation", dataclass=NoisedTranslationConfig)
class NoisedTranslationTask(TranslationTask):
    """Translation whose training batches are noised (every stock option still works).

    The source sentence is noised as context with source statistics; on the target side
    position k pairs ``prev_output_tokens[:, k]`` with ``target[:, k]``, with target statistics.
    Statistics count bigrams inside each sentence (with its final ``</s>``). Validation and test
    data are never noised. ``<blank>`` is always in both dictionaries. With
    ``--subword-sampling-alpha`` each training sentence is first given a new segmentation.
    """

    @classmethod
    def check_values(cls, cfg) -> None:
        """The checks of the flags' values alone, before any file is read (a sweep runs them on
        every row before the first trains)."""
        for flag in ("noise_gamma", "noise_gamma_source", "noise_gamma_target"):
            check_gamma(getattr(cfg, flag), "--" + flag.replace("_", "-"))
        subword.check_flags(cfg)

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        cls.check_values(cfg)
        data_dir = noising.check_data_dir(cfg.data)
        if cfg.source_lang is None or cfg.target_lang is None:
            cfg.source_lang, cfg.target_lang = data_utils.infer_language_pair(data_dir)
            if cfg.source_lang is None or cfg.target_lang is None:
                raise NoisingError(
                    f"cannot tell the language pair of {data_dir}: pass --source-lang and --target-lang"
                )
        for lang in (cfg.source_lang, cfg.target_lang):
            noising.check_file(os.path.join(data_dir, f"dict.{lang}.txt"), f"{lang} dictionary")
        task = super().setup_task(cfg, **kwargs)
        add_blank(task.src_dict)
        add_blank(task.tgt_dict)
        return task

    def _prefix(self, data_path, split, lang):
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        for a, b in ((src, tgt), (tgt, src)):
            prefix = os.path.join(data_path, f"{split}.{a}-{b}.{lang}")
            if os.path.exists(prefix + ".idx"):
                return prefix
        return os.path.join(data_path, f"{split}.{src}-{tgt}.{lang}")

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        is_train = split == self.cfg.train_subset
        noisers, samplers = {}, {}
        if is_train:
            paths = utils.split_paths(self.cfg.data)
            data_path = paths[(epoch - 1) % len(paths)]
            sides = {
                "source": (self.cfg.source_lang, self.src_dict),
                "target": (self.cfg.target_lang, self.tgt_dict),
            }
            noised = noised_sides(self.cfg)
            for side, (lang, dictionary) in sides.items():
                prefix = self._prefix(data_path, split, lang)
                _, stream = noising.load_split(
                    prefix, dictionary, self.cfg.dataset_impl, f"training {side} split"
                )
                if side in noised:
                    noisers[side] = task_noiser(self.cfg, stream, dictionary, side)
                sampled = self.cfg.subword_sampling_side in ("both", side)
                if subword.alpha_of(self.cfg) > 0 and sampled:
                    samplers[side] = subword.build_sampler(
                        self.cfg, data_path, dictionary, stream, SIDES[side], lang
                    )
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if noisers or samplers:
            self.datasets[split] = NoisedDataset(
                self.datasets[split], self.tgt_dict.pad(), noisers, samplers
            )
        return self.datasets[split]

    def build_model(self, cfg, from_checkpoint=False):
        if not from_checkpoint:
            precision.check_training(self.cfg.precision, cfg)
        return super().build_model(cfg, from_checkpoint)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        criterion = precision.autocast_forward(self.cfg.precision, criterion)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def get_batch_iterator(self, dataset, **kwargs):
        iterator = super().get_batch_iterator(dataset, **every_example(self, dataset, kwargs))
        return workers_end_with_their_epoch(iterator, dataset)
