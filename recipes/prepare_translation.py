#!/usr/bin/env python3
"""Data preparation for the translation recipes (iwslt15_en_de.sh, multi30k.sh).

Subcommands (each writes its outputs through a temporary name, so a half-written file is never
taken for a finished one):

``iwslt --tarball de-en.tgz --outdir D [--src en --tgt de] [--valid tst2012] [--test tst2014]``
    Extracts raw text from an IWSLT'15 texts release tarball (or an already extracted folder):
    ``train.tags.<pair>.<lang>`` (drops the metadata lines, which start with ``<`` such as
    ``<url>``, ``<talkid>``, ``<keywords>``, ``<speaker>``, ``<title>``, ``<description>``; both sides
    must agree line by line; pairs with an empty side are dropped) and the ``<seg>`` elements of
    ``IWSLT15.TED.<set>.<pair>.<lang>.xml`` for valid and test (XML entities unescaped). Writes
    ``train|valid|test.<src>|<tgt>``.

``plain --indir D --outdir O --src en --tgt de [--split train=train --split valid=val ...]``
    Copies parallel text files (``IN.<lang>``, or ``IN.<lang>.gz`` when only that exists),
    removing trailing empty lines (Multi30k's files end with one extra empty line, which must not
    become an empty sentence pair) and checking both sides agree.

``tokenize-dir --indir D --outdir O --src en --tgt de [--tokenizer auto|moses|simple]``
    Word tokenization of every ``{train,valid,test}.{src,tgt}`` of a folder, the tokenizer's name
    in ``O/tokenizer``. ``moses`` is sacremoses (Moses' tokenizer, no XML escaping); ``simple`` is a
    dependency-free fallback (runs of letters/digits with inner apostrophes, every other character
    alone); ``auto`` (default) is moses when sacremoses is importable. The tokenizers and their
    detokenizers (used before BLEU) are :mod:`fairseq_noising.sweep.bleu`.

``spm-dir --indir D --outdir O --src en --tgt de --vocab-size N [--joint] [--model-type bpe]``
    SentencePiece (unigram, or BPE) models trained on the training side of each language (or one
    joint model on both, ``--joint``), ``spm.<lang>.model`` (``spm.joint.model``) beside the
    encoded files, and each model's pieces as a fairseq dictionary, ``dict.<lang>.txt``.
"""

import argparse
import glob
import html
import os
import re
import sys
import tarfile
import tempfile

from fairseq_noising.subword import SubwordModel
from fairseq_noising.subword.prepare import train_model
from fairseq_noising.sweep.bleu import resolve_tokenizer, tokenize


def write_lines(path, lines):
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    os.replace(tmp, path)


def read_lines(path):
    """The lines of a file (split on "\\n" only; a missing final newline is tolerated); a path
    that does not exist is read from ``path.gz`` when that exists."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        import gzip

        with gzip.open(path + ".gz", "rt", encoding="utf-8") as f:
            text = f.read()
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def strip_trailing_empty(lines):
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


# ---------------------------------------------------------------- IWSLT extraction


def _find(root, pattern, what):
    hits = sorted(glob.glob(os.path.join(root, "**", pattern), recursive=True))
    if not hits:
        raise SystemExit(f"prepare_translation.py: no {what} ({pattern}) under {root}")
    return hits[0]


def train_tags_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").strip() for line in f]


def xml_segments(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    segs = re.findall(r"<seg[^>]*>(.*?)</seg>", text, flags=re.S)
    return [html.unescape(s).strip() for s in segs]


def extract_iwslt(tarball, outdir, src, tgt, valid_set, test_set):
    with tempfile.TemporaryDirectory() as tmp:
        if os.path.isdir(tarball):
            root = tarball
        else:
            with tarfile.open(tarball) as tar:
                members = [
                    m
                    for m in tar.getmembers()
                    if m.isfile() and not os.path.isabs(m.name) and ".." not in m.name.split("/")
                ]
                tar.extractall(tmp, members=members)
            root = tmp
        sides = {}
        for lang in (src, tgt):
            sides[lang] = train_tags_lines(
                _find(root, f"train.tags.*.{lang}", f"training file for {lang}")
            )
        a, b = sides[src], sides[tgt]
        if len(a) != len(b):
            raise SystemExit(
                f"prepare_translation.py: train.tags files differ in length ({len(a)} vs {len(b)})"
            )
        train = []
        for x, y in zip(a, b):
            tag_x, tag_y = x.startswith("<"), y.startswith("<")
            if tag_x != tag_y:
                raise SystemExit(
                    f"prepare_translation.py: train.tags files out of step at {x[:40]!r} / {y[:40]!r}"
                )
            if tag_x or not x or not y:
                continue
            train.append((x, y))
        os.makedirs(outdir, exist_ok=True)
        write_lines(os.path.join(outdir, f"train.{src}"), [x for x, _ in train])
        write_lines(os.path.join(outdir, f"train.{tgt}"), [y for _, y in train])
        counts = {"train": len(train)}
        for split, name in (("valid", valid_set), ("test", test_set)):
            segs = {}
            for lang in (src, tgt):
                segs[lang] = xml_segments(
                    _find(root, f"*{name}*.{lang}.xml", f"{name} file for {lang}")
                )
            if len(segs[src]) != len(segs[tgt]):
                raise SystemExit(
                    f"prepare_translation.py: {name} sides differ ({len(segs[src])} vs {len(segs[tgt])} segments)"
                )
            for lang in (src, tgt):
                write_lines(os.path.join(outdir, f"{split}.{lang}"), segs[lang])
            counts[split] = len(segs[src])
    print(f"extracted {counts}")
    return counts


def copy_plain(indir, outdir, src, tgt, splits):
    os.makedirs(outdir, exist_ok=True)
    counts = {}
    for split, name in splits:
        sides = {
            lang: strip_trailing_empty(read_lines(os.path.join(indir, f"{name}.{lang}")))
            for lang in (src, tgt)
        }
        if len(sides[src]) != len(sides[tgt]):
            raise SystemExit(
                f"prepare_translation.py: {name}.{src} and {name}.{tgt} differ in length"
            )
        empty = [
            i
            for i, (x, y) in enumerate(zip(sides[src], sides[tgt]))
            if not x.strip() or not y.strip()
        ]
        if empty:
            raise SystemExit(
                f"prepare_translation.py: {name} has empty lines inside (line {empty[0] + 1})"
            )
        for lang in (src, tgt):
            write_lines(os.path.join(outdir, f"{split}.{lang}"), [s.strip() for s in sides[lang]])
        counts[split] = len(sides[src])
    print(f"copied {counts}")
    return counts


def tokenize_file(inp, out, lang, tokenizer):
    kind = resolve_tokenizer(tokenizer)
    write_lines(out, tokenize(read_lines(inp), lang, kind))
    return kind


# ---------------------------------------------------------------- sentencepiece


def spm_encode(model, inp, out):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model)
    write_lines(out, [" ".join(sp.encode(l, out_type=str)) for l in read_lines(inp)])


SPLITS = ("train", "valid", "test")


def tokenize_dir(indir, outdir, src, tgt, tokenizer):
    os.makedirs(outdir, exist_ok=True)
    for split in SPLITS:
        for lang in (src, tgt):
            kind = tokenize_file(
                os.path.join(indir, f"{split}.{lang}"),
                os.path.join(outdir, f"{split}.{lang}"),
                lang,
                tokenizer,
            )
    with open(os.path.join(outdir, "tokenizer"), "w") as f:
        f.write(kind + "\n")


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


def main(argv=None):
    p = argparse.ArgumentParser(description="translation data preparation")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("iwslt")
    a.add_argument("--tarball", required=True)
    a.add_argument("--outdir", required=True)
    a.add_argument("--src", default="en")
    a.add_argument("--tgt", default="de")
    a.add_argument("--valid", default="tst2012")
    a.add_argument("--test", default="tst2014")
    a = sub.add_parser("plain")
    a.add_argument("--indir", required=True)
    a.add_argument("--outdir", required=True)
    a.add_argument("--src", default="en")
    a.add_argument("--tgt", default="de")
    a.add_argument(
        "--split",
        action="append",
        default=None,
        help="OUT=IN (repeatable); default train=train valid=val test=test",
    )
    a = sub.add_parser("tokenize-dir")
    a.add_argument("--indir", required=True)
    a.add_argument("--outdir", required=True)
    a.add_argument("--src", default="en")
    a.add_argument("--tgt", default="de")
    a.add_argument("--tokenizer", default="auto", choices=["auto", "moses", "simple"])
    a = sub.add_parser("spm-dir")
    a.add_argument("--indir", required=True)
    a.add_argument("--outdir", required=True)
    a.add_argument("--src", default="en")
    a.add_argument("--tgt", default="de")
    a.add_argument("--vocab-size", type=int, default=16000)
    a.add_argument("--joint", action="store_true")
    a.add_argument("--model-type", default="unigram", choices=["unigram", "bpe"])
    args = p.parse_args(argv)

    if args.cmd == "iwslt":
        extract_iwslt(args.tarball, args.outdir, args.src, args.tgt, args.valid, args.test)
    elif args.cmd == "plain":
        splits = [
            tuple(s.split("=", 1))
            for s in (args.split or ["train=train", "valid=val", "test=test"])
        ]
        copy_plain(args.indir, args.outdir, args.src, args.tgt, splits)
    elif args.cmd == "tokenize-dir":
        tokenize_dir(args.indir, args.outdir, args.src, args.tgt, args.tokenizer)
    elif args.cmd == "spm-dir":
        spm_dir(
            args.indir,
            args.outdir,
            args.src,
            args.tgt,
            args.vocab_size,
            args.joint,
            args.model_type,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
