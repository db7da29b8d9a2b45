"""What both noised tasks share: the noising flags, and reading their data files with one-line
checks (the noisers: :mod:`fairseq_noising.noiser_factory`)."""

import os
from dataclasses import dataclass, field
from typing import Any, Tuple

from fairseq import utils
from fairseq.data import data_utils, indexed_dataset
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from omegaconf import II

from ..errors import NoisingError
from ..schemes import SCHEMES, scheme_help
from ..stats_cache import TokenSplit, read_split

NOISE_SCHEME_CHOICES = ChoiceEnum(list(SCHEMES))


@dataclass
class NoisingConfig(FairseqDataclass):
    noise_scheme: NOISE_SCHEME_CHOICES = field(
        default="none",
        metadata={"help": scheme_help()},
    )
    noise_gamma: float = field(
        default=0.0,
        metadata={"help": "gamma_0, the base noising probability, in [0, 1]"},
    )
    seed: int = II("common.seed")
    train_subset: str = II("dataset.train_subset")


def check_data_dir(data) -> str:
    """The first data directory, which must exist."""
    if not data:
        raise NoisingError("no data directory given: pass the binarized data directory (DATA)")
    path = utils.split_paths(data)[0]
    if not os.path.isdir(path):
        raise NoisingError(
            f"data directory {path} does not exist (expected fairseq-preprocess output)"
        )
    return path


def check_file(path: str, what: str) -> None:
    if not os.path.isfile(path):
        raise NoisingError(f"{what} {path} is missing (expected fairseq-preprocess output)")


def load_split(prefix: str, dictionary, impl, what: str) -> Tuple[Any, TokenSplit]:
    """The binarized split at ``prefix`` and its tokens, read once; a one-line error if it is
    missing or empty, or holds ids its dictionary has not."""
    if not indexed_dataset.dataset_exists(prefix, impl=impl):
        raise NoisingError(f"{what} {prefix}.bin/.idx is missing (run fairseq-preprocess first)")
    empty = f"{what} {prefix}.bin is empty: expected binarized text"
    if os.path.getsize(prefix + ".bin") == 0:
        raise NoisingError(empty)
    dataset = data_utils.load_indexed_dataset(prefix, dictionary, impl)
    if dataset is None or len(dataset) == 0 or int(dataset.sizes.sum()) == 0:
        raise NoisingError(empty)
    split = read_split(prefix, dataset)
    if int(split.tokens.max()) >= len(dictionary):
        raise NoisingError(
            f"{what} {prefix}.bin holds token id {int(split.tokens.max())} but its dictionary has "
            f"only {len(dictionary)} symbols: the data and the dict file do not match"
        )
    return dataset, split
