"""``noised_language_modeling``: fairseq's ``language_modeling`` with data noising in training."""

import logging
import os
from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq import utils
from fairseq.data import indexed_dataset
from fairseq.distributed import utils as distributed_utils
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

from ..data.noised_dataset import NoisedDataset
from ..data.stateful_bptt_dataset import StatefulBPTTDataset
from ..errors import NoisingError
from ..fairseq_compat import (
    every_example,
    ordered_batch_iterator,
    takes_initial_state,
    workers_end_with_their_epoch,
)
from ..noiser_factory import add_blank, noised_sides, task_noiser
from ..schemes import check_gamma
from . import noising_config as noising
from . import precision
from . import subword_config as subword
from .state_carrier import InjectingIterator, StateCarrier

logger = logging.getLogger(__name__)


@dataclass
class NoisedLanguageModelingConfig(
    LanguageModelingConfig,
    noising.NoisingConfig,
    subword.SubwordSamplingConfig,
    precision.PrecisionConfig,
):
    stateful_bptt: bool = field(
        default=False,
        metadata={
            "help": "stateful truncated BPTT (Zaremba et al.): cut the training stream into "
            "--batch-size contiguous rows, read --tokens-per-sample steps of every row per batch "
            "in order, and carry the LSTM state (detached) from batch to batch; validation reads the "
            "whole split in --batch-size-valid contiguous rows (fairseq-eval-lm: --batch-size, "
            "default 1), so every token but a row's first keeps its full left context. Needs a "
            "model that takes initial_state (noising_lstm_lm)."
        },
    )
    special_eos: bool = field(
        default=False,
        metadata={
            "help": "treat </s> as a structural symbol, as translation does: never noised, drawn "
            "from q, or replaced as a target (default: </s> is an ordinary word, as <eos> is in "
            "the authors' code; consider this flag with --sample-break-mode eos)"
        },
    )


@register_task("noised_language_modeling", dataclass=NoisedLanguageModelingConfig)
class NoisedLanguageModelingTask(LanguageModelingTask):
    """Language modeling whose training batches are noised (every stock option still works).

    Statistics come from the whole training stream (each line followed by ``</s>``, bigrams
    across line ends); position j pairs context ``src_tokens[:, j]`` with ``target[:, j]``.
    ``</s>`` is an ordinary word (counted, noised, drawn, replaced) unless ``--special-eos``.
    Validation and test data are never noised. ``<blank>`` is always in the dictionary.

    With ``--stateful-bptt`` batches are blocks of contiguous rows
    (:class:`~fairseq_noising.data.stateful_bptt_dataset.StatefulBPTTDataset`) read in order, and
    the model's final hidden state of one batch is the initial state of the next
    (:class:`~fairseq_noising.tasks.state_carrier.StateCarrier`); the state is reset at the start
    of every epoch and of every evaluation split. Under data-parallel training each rank owns
    --batch-size rows of its own.
    """

    def __init__(self, args, dictionary, output_dictionary=None, targets=None):
        super().__init__(args, dictionary, output_dictionary, targets=targets)
        self.carrier = StateCarrier() if getattr(args, "stateful_bptt", False) else None

    @classmethod
    def setup_dictionary(cls, args, **kwargs):
        if args.data:
            data_dir = noising.check_data_dir(args.data)
            noising.check_file(os.path.join(data_dir, "dict.txt"), "dictionary")
        dictionary, output_dictionary = super().setup_dictionary(args, **kwargs)
        if dictionary is not None:
            add_blank(dictionary)
            if output_dictionary is not dictionary and hasattr(output_dictionary, "add_symbol"):
                add_blank(output_dictionary)
        return dictionary, output_dictionary

    @classmethod
    def check_values(cls, args) -> None:
        """The checks of the flags' values alone, before any file is read (a sweep runs them on
        every row before the first trains)."""
        check_gamma(args.noise_gamma, "--noise-gamma")
        subword.check_flags(args)
        if subword.alpha_of(args) > 0:
            for flag in ("stateful_bptt", "add_bos_token"):
                if getattr(args, flag, False):
                    raise NoisingError(
                        f"--subword-sampling-alpha does not apply with --{flag.replace('_', '-')} "
                        "(a new segmentation changes every example's length)"
                    )

    @classmethod
    def setup_task(cls, args, **kwargs):
        cls.check_values(args)
        return super().setup_task(args, **kwargs)

    def _split_prefix(self, split, epoch):
        paths = utils.split_paths(self.args.data)
        return os.path.join(paths[(epoch - 1) % len(paths)], split)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        is_train = split == getattr(self.args, "train_subset", "train")
        prefix = self._split_prefix(split, epoch if is_train else 1)
        stream = None  # the split's tokens, read once: for the training split or stateful BPTT
        if is_train or self.carrier is not None:
            what = "training split" if is_train else f"{split} split"
            _, stream = noising.load_split(prefix, self.dictionary, self.args.dataset_impl, what)
        elif not indexed_dataset.dataset_exists(prefix, impl=self.args.dataset_impl):
            raise NoisingError(
                f"{split} split {prefix}.bin/.idx is missing "
                "(run fairseq-preprocess with --validpref/--testpref, or pass --valid-subset)"
            )
        if self.carrier is not None:
            self.datasets[split] = self._stateful_dataset(stream.tokens, is_train)
        else:
            super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if not is_train:
            return self.datasets[split]
        noisers = {side: task_noiser(self.args, stream, self.dictionary, side)
                   for side in noised_sides(self.args)}  # fmt: skip
        samplers = {}
        if subword.alpha_of(self.args) > 0:
            data_dir = os.path.dirname(prefix)
            samplers["target"] = subword.build_sampler(
                self.args, data_dir, self.dictionary, stream, 0
            )
        if noisers or samplers:
            self.datasets[split] = NoisedDataset(
                self.datasets[split], self.dictionary.pad(), noisers, samplers
            )
        return self.datasets[split]

    # --- stateful truncated BPTT --------------------------------------------------------------

    def _stateful_dataset(self, tokens, is_train):
        if is_train:
            if not self.args.batch_size:
                raise NoisingError("--stateful-bptt needs --batch-size (the number of rows)")
            rank, world = 0, 1
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                rank = distributed_utils.get_data_parallel_rank()
                world = distributed_utils.get_data_parallel_world_size()
            rows = self.args.batch_size
            row_ids = np.arange(rank * rows, (rank + 1) * rows)
            num_rows = rows * world
        else:
            # evaluation reads the whole split in --batch-size-valid rows (fairseq-eval-lm:
            # --batch-size; default 1): every token but the first of each row keeps its whole
            # left context. Every rank evaluates the whole split. The end of the stream is
            # padded, not dropped: every token but the split's first is scored exactly once.
            num_rows = int(
                getattr(self.args, "batch_size_valid", None) or self.args.batch_size or 1
            )
            row_ids = np.arange(num_rows)
        try:
            return StatefulBPTTDataset(
                tokens,
                num_rows,
                row_ids,
                self.args.tokens_per_sample,
                pad=None if is_train else self.dictionary.pad(),
            )
        except ValueError as e:
            raise NoisingError(f"--stateful-bptt: {e}")

    def build_model(self, args, from_checkpoint=False):
        if not from_checkpoint:
            precision.check_training(self.args.precision, args)
        model = super().build_model(args, from_checkpoint)
        if self.carrier is not None:
            if not takes_initial_state(model):
                raise NoisingError(
                    f"--stateful-bptt needs a model whose decoder takes initial_state "
                    f"(such as --arch noising_lstm_lm); {type(model).__name__} does not"
                )
            self.carrier.attach(model.decoder)
        return model

    def get_batch_iterator(self, dataset, num_workers=0, epoch=1, data_buffer_size=0, **kwargs):
        inner = dataset.dataset if isinstance(dataset, NoisedDataset) else dataset
        if not isinstance(inner, StatefulBPTTDataset):
            iterator = super().get_batch_iterator(
                dataset,
                num_workers=num_workers,
                epoch=epoch,
                data_buffer_size=data_buffer_size,
                **every_example(self, dataset, kwargs),
            )
            return workers_end_with_their_epoch(iterator, dataset)
        # every item is a whole batch, read in order; rows are already split between ranks
        dataset.set_epoch(epoch)
        if inner.pad is not None:
            # a pass over an evaluation split (only those are padded) starts from a zero state:
            # fairseq's validation builds one iterator per --valid-subset, fairseq-validate and
            # fairseq-eval-lm one per split, and nothing else marks the start of a split
            self.carrier.reset("eval")
        return ordered_batch_iterator(
            dataset,
            seed=kwargs.get("seed", 1),
            num_workers=num_workers,
            epoch=epoch,
            buffer_size=data_buffer_size,
        )

    def begin_epoch(self, epoch, model):
        super().begin_epoch(epoch, model)
        if self.carrier is not None:
            self.carrier.reset("train")

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if self.carrier is not None:
            self.carrier.inject(sample, "train")
        criterion = precision.autocast_forward(self.args.precision, criterion)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        if self.carrier is not None:
            self.carrier.inject(sample, "eval")
        return super().valid_step(sample, model, criterion)

    def eval_lm_dataloader(self, dataset, **kwargs):
        if self.carrier is None:
            return super().eval_lm_dataloader(dataset, **kwargs)
        if kwargs.get("context_window", 0) > 0:
            raise NoisingError(
                "--context-window does not apply with --stateful-bptt (the state carries all context)"
            )
        iterator = self.get_batch_iterator(
            dataset,
            num_workers=kwargs.get("num_workers", 0),
            data_buffer_size=kwargs.get("data_buffer_size", 0),
        ).next_epoch_itr(shuffle=False)
        return InjectingIterator(iterator, self.carrier, "eval")
