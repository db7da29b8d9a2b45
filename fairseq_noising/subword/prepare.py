"""Training a sentencepiece model for the recipes (recipes/prepare_translation.py spm-dir)."""

import os
from typing import Sequence


def train_model(inputs: Sequence[str], prefix: str, vocab_size: int, model_type="unigram") -> str:
    """``prefix.model`` and ``prefix.vocab`` trained on the text files ``inputs``, written
    through a temporary name; the model's path."""
    import sentencepiece as spm

    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=",".join(inputs),
        model_prefix=prefix + ".part",
        vocab_size=vocab_size,
        character_coverage=1.0,
        model_type=model_type,
        hard_vocab_limit=False,
        input_sentence_size=2_000_000,
        shuffle_input_sentence=True,
        minloglevel=2,
    )
    for ext in ("model", "vocab"):
        os.replace(f"{prefix}.part.{ext}", f"{prefix}.{ext}")
    return prefix + ".model"
