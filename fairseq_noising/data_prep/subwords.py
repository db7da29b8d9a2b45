"""SentencePiece (unigram) models trained on the training side of a parallel corpus, and the
corpus encoded with them, for ``prepare_translation.py spm-dir``."""

import os

from .lines import SPLITS, read_lines, write_lines


def spm_train(inputs, prefix, vocab_size):
    import sentencepiece as spm

    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=",".join(inputs),
        model_prefix=prefix + ".part",
        vocab_size=vocab_size,
        character_coverage=1.0,
        model_type="unigram",
        hard_vocab_limit=False,
        input_sentence_size=2_000_000,
        shuffle_input_sentence=True,
        minloglevel=2,
    )
    for ext in ("model", "vocab"):
        os.replace(f"{prefix}.part.{ext}", f"{prefix}.{ext}")


def spm_encode(model, inp, out):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model)
    write_lines(out, [" ".join(sp.encode(l, out_type=str)) for l in read_lines(inp)])


def spm_dir(indir, outdir, src, tgt, vocab_size, joint):
    os.makedirs(outdir, exist_ok=True)
    if joint:
        prefix = os.path.join(outdir, "spm.joint")
        spm_train([os.path.join(indir, f"train.{l}") for l in (src, tgt)], prefix, vocab_size)
        models = {src: prefix + ".model", tgt: prefix + ".model"}
    else:
        models = {}
        for lang in (src, tgt):
            prefix = os.path.join(outdir, f"spm.{lang}")
            spm_train([os.path.join(indir, f"train.{lang}")], prefix, vocab_size)
            models[lang] = prefix + ".model"
    for split in SPLITS:
        for lang in (src, tgt):
            spm_encode(
                models[lang],
                os.path.join(indir, f"{split}.{lang}"),
                os.path.join(outdir, f"{split}.{lang}"),
            )
