"""A checkpoint of this plugin and its split, batch by batch, for ``fairseq-noise-analyze``.

Every target is mapped to its index in the split's token stream; ``--eval-mode`` and the
stateful evaluation are described in docs/analysis.md.
"""

import os
import sys
from argparse import Namespace
from dataclasses import dataclass
from typing import Iterator, Tuple

import numpy as np
import torch
from fairseq import checkpoint_utils, utils
from fairseq.data import MonolingualDataset, TokenBlockDataset
from fairseq.logging import progress_bar

import fairseq_noising

from .. import scoring
from ..data.noised_dataset import NoisedDataset
from ..data.stateful_bptt_dataset import StatefulBPTTDataset
from ..errors import NoisingError
from ..fairseq_compat import final_state, takes_initial_state
from ..noiser_factory import task_noiser
from ..stats_cache import load_or_build_stats
from ..tasks.noising_config import check_data_dir, load_split

PLUGIN_DIR = os.path.dirname(os.path.abspath(fairseq_noising.__file__))


def pick_device(cpu: bool = False) -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() and not cpu else "cpu")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Batch:
    sample: dict  # on the device
    positions: np.ndarray  # [B, T] index of each target in the split's stream, -1 for padding
    mask: torch.Tensor  # bool [B, T] on the device: a real target


class LoadedModel:
    """A checkpoint of this plugin, its task, and how to stream a split through it."""

    def __init__(
        self,
        path,
        data=None,
        eval_mode="auto",
        batch_size=None,
        max_tokens=None,
        device=None,
        seed=1,
        log_format=None,
    ):
        if not os.path.isfile(path):
            raise NoisingError(f"checkpoint {path} does not exist")
        utils.import_user_module(Namespace(user_dir=PLUGIN_DIR))
        overrides = {}
        if data:
            overrides["data"] = data
        if eval_mode == "stateful":
            overrides["stateful_bptt"] = True
        elif eval_mode == "stateless":
            overrides["stateful_bptt"] = False
        if batch_size:
            overrides["batch_size_valid"] = batch_size
        state = checkpoint_utils.load_checkpoint_to_cpu(path, overrides)
        cfg = state["cfg"]
        if cfg.task._name != "noised_language_modeling":
            raise NoisingError(
                f"{path} was trained with --task {cfg.task._name}; the analyses need a "
                "noised_language_modeling checkpoint"
            )
        try:
            self.data_dir = check_data_dir(cfg.task.data)
        except NoisingError as e:
            raise NoisingError(f"{e.message}; pass the binarized data directory with --data")
        model, cfg, task = scoring.load_model(path, state=state)
        self.path, self.cfg, self.task = path, cfg, task
        self.device = device or pick_device()
        self.model = model.to(self.device)
        self.stateful = bool(getattr(cfg.task, "stateful_bptt", False))
        if self.stateful and not takes_initial_state(self.model):
            raise NoisingError(
                f"{path}: stateful evaluation needs a decoder that takes initial_state"
            )
        self.batch_size = batch_size or cfg.dataset.batch_size_valid or cfg.dataset.batch_size or 16
        self.max_tokens = max_tokens
        self.seed = seed
        self.log_format = log_format
        self.dictionary = task.target_dictionary
        self.pad = self.dictionary.pad()
        self.scheme = str(cfg.task.noise_scheme)
        self.gamma = float(cfg.task.noise_gamma)
        torch.manual_seed(seed)

    # --- data ------------------------------------------------------------------------------

    @property
    def train_prefix(self) -> str:
        return os.path.join(
            self.data_dir, getattr(self.cfg.dataset, "train_subset", "train") or "train"
        )

    def read_split(self, split: str):
        """The binarized ``split``'s tokens (a :class:`~fairseq_noising.stats_cache.TokenSplit`)."""
        prefix = os.path.join(self.data_dir, split)
        dictionary, impl = self.task.source_dictionary, self.cfg.task.dataset_impl
        return load_split(prefix, dictionary, impl, f"{split} split")[1]

    def stream(self, split: str) -> np.ndarray:
        return self.read_split(split).tokens

    def train_stats(self):
        train = self.read_split(os.path.basename(self.train_prefix))
        return load_or_build_stats(train, self.task.source_dictionary, "stream")

    def noiser(self, scheme=None, gamma=None, seed=None):
        """The noiser this checkpoint's training used (its ``</s>`` included), over its training
        statistics; another scheme, gamma_0 or seed where given (the seed: this run's by
        default)."""
        train = self.read_split(os.path.basename(self.train_prefix))
        seed = self.seed if seed is None else seed
        dictionary = self.task.source_dictionary
        return task_noiser(self.cfg.task, train, dictionary, scheme=scheme, gamma=gamma, seed=seed)

    def _dataset(self, split):
        self.task.load_dataset(split)
        dataset = self.task.dataset(split)
        if isinstance(dataset, NoisedDataset):  # evaluating the training split: read it clean
            dataset = dataset.dataset
        return dataset

    def _positions(self, dataset, sample, target) -> np.ndarray:
        ids = sample["id"].cpu().numpy()
        rows, length = target.shape
        cols = np.arange(length)
        if isinstance(dataset, StatefulBPTTDataset):
            block, row = ids // dataset.num_rows, ids % dataset.num_rows
            start = row * dataset.row_length + block * dataset.block_size + 1
        elif isinstance(dataset, MonolingualDataset) and isinstance(
            dataset.dataset, TokenBlockDataset
        ):
            start = np.asarray(dataset.dataset.slice_indices)[ids, 0]
        else:
            raise NoisingError(
                f"cannot map the targets of a {type(dataset).__name__} to the stream"
            )
        positions = start[:, None] + cols[None, :]
        return np.where(target != self.pad, positions, -1)

    def batches(self, split: str, desc: str = "") -> Iterator[Batch]:
        """The split's batches in order, with each target's index in the split's stream."""
        dataset = self._dataset(split)
        stream = self.stream(split)
        if isinstance(dataset, StatefulBPTTDataset):
            itr = self.task.get_batch_iterator(dataset)
        else:
            itr = self.task.get_batch_iterator(
                dataset=dataset,
                max_tokens=self.max_tokens,
                max_sentences=self.batch_size if not self.max_tokens else None,
                max_positions=utils.resolve_max_positions(
                    self.task.max_positions(), self.model.max_positions()
                ),
                ignore_invalid_inputs=True,
                seed=self.seed,
                num_workers=0,
            )
        itr = itr.next_epoch_itr(shuffle=False)
        default = "tqdm" if sys.stderr.isatty() else "simple"
        bar = progress_bar.progress_bar(
            itr,
            log_format=self.log_format,
            log_interval=max(1, len(itr) // 10),
            prefix=desc or split,
            default_log_format=default,
        )
        done = 0
        for sample in bar:
            if not sample or "net_input" not in sample:
                continue
            done += int(sample["ntokens"])
            bar.log({"targets": done})
            target = sample["target"].cpu().numpy()
            positions = self._positions(dataset, sample, target)
            real = positions >= 0
            if not np.array_equal(stream[positions[real]], target[real]):
                raise NoisingError(
                    f"the targets of {split} do not line up with its token stream (options such "
                    "as --add-bos-token or --shorten-method are not supported by this analysis)"
                )
            sample = (
                utils.move_to_cuda(sample, self.device) if self.device.type == "cuda" else sample
            )
            sample["target"] = sample["target"].contiguous()
            yield Batch(sample, positions, torch.from_numpy(real).to(self.device))

    # --- model -----------------------------------------------------------------------------

    def log_probs(self, src_tokens, src_lengths, state=None):
        """Log-probabilities [B, T, V] and the final state (stateful mode; else None)."""
        kwargs = {}
        if self.stateful and state is not None:
            kwargs["initial_state"] = state
        net_input = {"src_tokens": src_tokens, "src_lengths": src_lengths}
        lprobs, net_output = scoring.log_probs(self.model, net_input, **kwargs)
        return lprobs, final_state(net_output) if self.stateful else None

    def scored_batches(self, split: str, desc: str = "") -> Iterator[Tuple[Batch, torch.Tensor]]:
        """The split's batches with their log-probabilities, the state carried when stateful."""
        state = None
        for batch in self.batches(split, desc):
            net = batch.sample["net_input"]
            lprobs, state = self.log_probs(net["src_tokens"], net["src_lengths"], state)
            yield batch, lprobs
