"""Parallel text for the translation recipes (``recipes/prepare_translation.py`` is the command
line): IWSLT'15 extracted from its release tarball, plain parallel files copied (Multi30k), word
tokenization (:mod:`.tokenizers`) and sentencepiece (:mod:`.subwords`). Every file is written
through a temporary name, so a half-written file is never taken for a finished one; the
subcommands are in recipes/README.md.
"""

import argparse
import glob
import html
import os
import re
import sys
import tarfile
import tempfile

from .lines import SPLITS, read_lines, strip_trailing_empty, write_lines
from .subwords import spm_dir
from .tokenizers import resolve_tokenizer, tokenize

# ---------------------------------------------------------------- IWSLT extraction


def _first_file(root, pattern, what):
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
                _first_file(root, f"train.tags.*.{lang}", f"training file for {lang}")
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
                    _first_file(root, f"*{name}*.{lang}.xml", f"{name} file for {lang}")
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


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="prepare_translation.py", description="parallel text for the translation recipes"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    commands = {
        "iwslt": "train.tags.* minus metadata lines, <seg>s of the valid and test sets' .xml",
        "plain": "IN.<lang> (or IN.<lang>.gz) copied, trailing empty lines removed",
        "tokenize-dir": "{train,valid,test}.{src,tgt} word-tokenized; the tokenizer in O/tokenizer",
        "spm-dir": "sentencepiece models on train (one per language, or --joint), encoding, "
        "and each model's pieces as dict.<lang>.txt",
    }
    parsers = {name: sub.add_parser(name, help=text) for name, text in commands.items()}
    for name, a in parsers.items():
        if name == "iwslt":
            a.add_argument("--tarball", required=True, help="the release tarball, or its folder")
        else:
            a.add_argument("--indir", required=True)
        a.add_argument("--outdir", required=True)
        a.add_argument("--src", default="en")
        a.add_argument("--tgt", default="de")
    parsers["iwslt"].add_argument("--valid", default="tst2012")
    parsers["iwslt"].add_argument("--test", default="tst2014")
    parsers["plain"].add_argument(
        "--split",
        action="append",
        help="OUT=IN (repeatable); default train=train valid=val test=test",
    )
    parsers["tokenize-dir"].add_argument(
        "--tokenizer", default="auto", choices=["auto", "moses", "simple"]
    )
    parsers["spm-dir"].add_argument("--vocab-size", type=int, default=16000)
    parsers["spm-dir"].add_argument("--joint", action="store_true")
    parsers["spm-dir"].add_argument("--model-type", default="unigram", choices=["unigram", "bpe"])
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
