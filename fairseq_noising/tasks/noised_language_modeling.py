"""``noised_language_modeling``: fairseq's ``language_modeling`` with data noising in training."""

import logging
import os
from dataclasses import dataclass

from fairseq import utils
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

from ..data.noised_dataset import NoisedDataset
from ..noiser import Noiser
from ._noising import (
    NoisingConfig,
    add_blank,
    build_noiser,
    check_data_dir,
    check_file,
    check_gamma,
    load_split,
)

logger = logging.getLogger(__name__)


@dataclass
class NoisedLanguageModelingConfig(LanguageModelingConfig, NoisingConfig):
    pass


@register_task("noised_language_modeling", dataclass=NoisedLanguageModelingConfig)
class NoisedLanguageModelingTask(LanguageModelingTask):
    """Language modeling whose training batches are noised (every stock option still works).

    Statistics come from the whole training stream (each line followed by ``</s>``, bigrams
    across line ends); position j pairs context ``src_tokens[:, j]`` with ``target[:, j]``.
    Validation and test data are never noised. ``<blank>`` is always in the dictionary.
    """

    @classmethod
    def setup_dictionary(cls, args, **kwargs):
        if args.data:
            data_dir = check_data_dir(args.data)
            check_file(os.path.join(data_dir, "dict.txt"), "dictionary")
        dictionary, output_dictionary = super().setup_dictionary(args, **kwargs)
        if dictionary is not None:
            add_blank(dictionary)
            if output_dictionary is not dictionary and hasattr(output_dictionary, "add_symbol"):
                add_blank(output_dictionary)
        return dictionary, output_dictionary

    @classmethod
    def setup_task(cls, args, **kwargs):
        check_gamma(args.noise_gamma, "--noise-gamma")
        return super().setup_task(args, **kwargs)

    def _train_prefix(self, split, epoch):
        paths = utils.split_paths(self.args.data)
        return os.path.join(paths[(epoch - 1) % len(paths)], split)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        is_train = split == getattr(self.args, "train_subset", "train")
        raw = None
        if is_train:
            prefix = self._train_prefix(split, epoch)
            raw = load_split(prefix, self.dictionary, self.args.dataset_impl, "training split")
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if is_train and self.args.noise_scheme != "none":
            noiser = build_noiser(
                self.args.noise_scheme,
                self.args.noise_gamma,
                prefix,
                raw,
                self.dictionary,
                mode="stream",
                seed=self.args.seed,
                side=0,
            )
            self.datasets[split] = self.wrap_noised(self.datasets[split], noiser)
        return self.datasets[split]

    def wrap_noised(self, dataset, noiser: Noiser):
        return NoisedDataset(dataset, "lm", pad=self.dictionary.pad(), noiser=noiser)
