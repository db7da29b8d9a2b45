"""The noisers a noised task's config trains with: built here alone, for both tasks and the CLIs.

A config is a running task's or a checkpoint's (``cfg.task``); a dictionary is a fairseq
``Dictionary`` or anything with its ``symbols``, ``index``, ``unk``, ``eos`` and ``nspecial``.
"""

import logging
from typing import List

from .noiser import Noiser
from .schemes import build_scheme
from .stats_cache import TokenSplit, load_or_build_stats

logger = logging.getLogger(__name__)

BLANK_SYMBOL = "<blank>"
# each side hashes with its own key (fairseq_noising.noiser.SIDE_KEYS); a language model's
# (context, target) pairs are its "target" side
SIDES = {"target": 0, "source": 1}


def add_blank(dictionary) -> int:
    """Adds ``<blank>`` (whatever the scheme, so every model shares one dictionary)."""
    return dictionary.add_symbol(BLANK_SYMBOL)


def special_ids(dictionary, eos_special: bool = True) -> List[int]:
    """Symbols that are never noised, drawn or replaced: padding, ``<s>``, ``<blank>``, the other
    reserved symbols but ``<unk>``, and ``</s>`` unless ``eos_special`` is False (language
    modeling, where ``</s>`` is an ordinary word as ``<eos>`` is in the authors' code)."""
    ordinary = {dictionary.unk()} if eos_special else {dictionary.unk(), dictionary.eos()}
    reserved = [i for i in range(dictionary.nspecial) if i not in ordinary]
    return reserved + [dictionary.index(BLANK_SYMBOL)]


def is_translation(cfg) -> bool:
    return hasattr(cfg, "noise_side")


def noised_sides(cfg) -> List[str]:
    """The sides that ``cfg`` noises in training: none, a language model's ``"target"``, or
    translation's ``--noise-side``."""
    if cfg.noise_scheme == "none":
        return []
    if not is_translation(cfg):
        return ["target"]
    return [side for side in ("source", "target") if cfg.noise_side in ("both", side)]


def side_gamma(cfg, side: str) -> float:
    """gamma_0 of ``side``: translation's ``--noise-gamma-{side}`` where set, else
    ``--noise-gamma``."""
    value = getattr(cfg, f"noise_gamma_{side}", None)
    return float(cfg.noise_gamma if value is None else value)


def task_noiser(
    cfg, split: TokenSplit, dictionary, side: str = "target", scheme=None, gamma=None, seed=None
) -> Noiser:
    """The noiser ``cfg`` trains ``side`` with, over the statistics of its training ``split``
    (cached beside it): its scheme, gamma_0 and seed unless given, and its ``</s>``: an ordinary
    word for a language model unless ``--special-eos``, always structural in translation."""
    scheme = str(cfg.noise_scheme if scheme is None else scheme)
    gamma = side_gamma(cfg, side) if gamma is None else float(gamma)
    translation = is_translation(cfg)
    stats = load_or_build_stats(split, dictionary, "sentences" if translation else "stream")
    eos_special = bool(getattr(cfg, "special_eos", True))  # translation's config has no flag
    built = build_scheme(
        scheme,
        stats,
        gamma,
        special_ids(dictionary, eos_special),
        blank_index=dictionary.index(BLANK_SYMBOL),
        vocab_size=len(dictionary),
    )
    logger.info(
        f"noising {split.prefix} with {scheme}, gamma_0={gamma}: mean noising probability "
        f"{float((built.gamma * stats.unigram).sum() / max(stats.num_tokens, 1)):.4f} per token"
    )
    return Noiser(built, seed=cfg.seed if seed is None else seed, side=SIDES[side])
