"""What both noised tasks share: the noising flags, their checks, and building the noisers."""

import logging
import os
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.data import data_utils, indexed_dataset
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from omegaconf import II

from ..errors import NoisingError
from ..noiser import Noiser
from ..schemes import SCHEMES, build_scheme, scheme_help
from ..stats_cache import load_or_build_stats, read_token_stream

logger = logging.getLogger(__name__)

BLANK_SYMBOL = "<blank>"
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


def check_gamma(value, flag: str) -> None:
    if value is not None and not 0.0 <= float(value) <= 1.0:
        raise NoisingError(f"{flag} must lie in [0, 1], got {value}")


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


def load_split(prefix: str, dictionary, impl, what: str):
    """The binarized split at ``prefix``; a one-line error if it is missing or empty."""
    if not indexed_dataset.dataset_exists(prefix, impl=impl):
        raise NoisingError(f"{what} {prefix}.bin/.idx is missing (run fairseq-preprocess first)")
    empty = f"{what} {prefix}.bin is empty: expected binarized text"
    if os.path.getsize(prefix + ".bin") == 0:
        raise NoisingError(empty)
    dataset = data_utils.load_indexed_dataset(prefix, dictionary, impl)
    if dataset is None or len(dataset) == 0 or int(dataset.sizes.sum()) == 0:
        raise NoisingError(empty)
    tokens, _ = read_token_stream(dataset)
    if int(tokens.max()) >= len(dictionary):
        raise NoisingError(
            f"{what} {prefix}.bin holds token id {int(tokens.max())} but its dictionary has only "
            f"{len(dictionary)} symbols: the data and the dict file do not match"
        )
    return dataset


def add_blank(dictionary) -> int:
    """Adds ``<blank>`` (whatever the scheme, so every model shares one dictionary)."""
    return dictionary.add_symbol(BLANK_SYMBOL)


def special_ids(dictionary, eos_special: bool = True):
    """Symbols that are never noised, drawn or replaced: padding, ``<s>``, ``<blank>``, the other
    reserved symbols but ``<unk>``, and ``</s>`` unless ``eos_special`` is False (language
    modeling, where ``</s>`` is an ordinary word as ``<eos>`` is in the authors' code)."""
    ordinary = {dictionary.unk()} if eos_special else {dictionary.unk(), dictionary.eos()}
    reserved = [i for i in range(dictionary.nspecial) if i not in ordinary]
    return reserved + [dictionary.index(BLANK_SYMBOL)]


def build_noiser(
    scheme_name, gamma, prefix, dataset, dictionary, mode, seed, side, eos_special=True
):
    """A :class:`Noiser` for one side, from the (cached) statistics of its training data."""
    stats = load_or_build_stats(prefix, dataset, dictionary, mode)
    blank = dictionary.index(BLANK_SYMBOL)
    specials = special_ids(dictionary, eos_special)
    scheme = build_scheme(
        scheme_name, stats, gamma, specials, blank_index=blank, vocab_size=len(dictionary)
    )
    logger.info(
        f"noising {prefix} with {scheme_name}, gamma_0={gamma}: mean noising probability "
        f"{float((scheme.gamma * stats.unigram).sum() / max(stats.num_tokens, 1)):.4f} per token"
    )
    return Noiser(scheme, seed=seed, side=side)


def task_noiser(cfg, prefix, dataset, dictionary, mode, side, scheme=None, gamma=None, seed=None):
    """The noiser a task config trains with on one side (``cfg``: a noised task's config, the
    running task's or a checkpoint's): its scheme, gamma_0 and seed unless given, and its
    ``</s>``: an ordinary word for a language model unless ``--special-eos``, always structural
    in translation (whose config has no such flag). The tasks and the CLIs build it here alone."""
    return build_noiser(
        cfg.noise_scheme if scheme is None else scheme,
        float(cfg.noise_gamma if gamma is None else gamma),
        prefix,
        dataset,
        dictionary,
        mode=mode,
        seed=cfg.seed if seed is None else seed,
        side=side,
        eos_special=bool(getattr(cfg, "special_eos", True)),
    )
