"""SentencePiece models (unigram or BPE) trained on the training side of a parallel corpus, the
corpus encoded with them, and each model's pieces as a fairseq dictionary, for
``prepare_translation.py spm-dir``."""

import os
import sys
from typing import Sequence

from ..subword import SubwordModel
from .lines import SPLITS, read_lines, write_lines


def train_model(inputs: Sequence[str], prefix: str, vocab_size: int, model_type="unigram") -> str:
    """``prefix.model`` and ``prefix.vocab`` trained on the text files ``inputs``, written
    through a temporary name; the model's path. A model with fewer pieces than ``vocab_size``
    (a text too small for it: ``hard_vocab_limit=False`` lets sentencepiece stop short) is said
    in one line on stderr."""
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
    pieces = spm.SentencePieceProcessor(model_file=prefix + ".model").get_piece_size()
    if pieces < vocab_size:
        print(
            f"{prefix}.model has {pieces:,} pieces, fewer than the {vocab_size:,} asked "
            "(--vocab-size): its training text holds no more",
            file=sys.stderr,
        )
    return prefix + ".model"


def spm_encode(model, inp, out):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model)
    write_lines(out, [" ".join(sp.encode(l, out_type=str)) for l in read_lines(inp)])


def spm_dir(indir, outdir, src, tgt, vocab_size, joint, model_type="unigram"):
    os.makedirs(outdir, exist_ok=True)
    models = {}
    for lang in (src, tgt):
        if joint and models:
            models[lang] = models[src]
        else:
            inputs = [os.path.join(indir, f"train.{l}") for l in ((src, tgt) if joint else (lang,))]
            prefix = os.path.join(outdir, "spm.joint" if joint else f"spm.{lang}")
            models[lang] = train_model(inputs, prefix, vocab_size, model_type)
        # every piece, so that any sampled segmentation has ids (fairseq-preprocess --srcdict)
        SubwordModel(models[lang]).write_dictionary(os.path.join(outdir, f"dict.{lang}.txt"))
    for split in SPLITS:
        for lang in (src, tgt):
            spm_encode(
                models[lang],
                os.path.join(indir, f"{split}.{lang}"),
                os.path.join(outdir, f"{split}.{lang}"),
            )
