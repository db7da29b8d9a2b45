#!/usr/bin/env python3
"""Splits Text8 as in Section 4.1 of the paper and writes one-sentence-per-line text files.

Text8 (http://mattmahoney.net/dc/text8.zip) is one line of 100,000,000 characters: lower-case
words separated by single spaces. The paper uses "the first 90M characters for training, the next
5M for validation, and the final 5M for testing" and maps "all words which appear 10 or fewer
times to the unknown token" (a 42K vocabulary). This script:

1. reads the stream (``text8`` or ``text8.zip``), cuts it at character offsets ``train_chars`` and
   ``train_chars + valid_chars``; test is the ``test_chars`` characters after that (the last 5M of
   text8). A cut can fall inside a word, which then contributes a fragment to both sides: this is
   what a cut "by characters" means, and it affects at most two words per boundary;
2. counts words in the training part only; a word seen ``min_count`` (10) or fewer times there
   (and any word absent from it) becomes ``<unk>`` in all three parts;
3. breaks each part into lines of ``words_per_line`` words (default 1000; the last line may be
   shorter). fairseq appends ``</s>`` to every line, so this adds one end-of-line token per
   ``words_per_line`` words (0.1% by default) to a stream that has no sentence boundaries; with
   stateful BPTT the lines are read as one continuous stream anyway.

Writes ``train.txt``, ``valid.txt``, ``test.txt`` and ``stats.json`` (token counts, vocabulary
size) into the output folder.

    python recipes/prepare_text8.py --input text8.zip --outdir runs/text8/text
"""

import argparse
import collections
import json
import os
import sys
import zipfile

UNK = "<unk>"


def read_stream(path: str) -> str:
    if path.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if not n.endswith("/")]
            name = "text8" if "text8" in names else names[0]
            return z.read(name).decode("utf-8")
    with open(path, encoding="utf-8") as f:
        return f.read()


def split_chars(text: str, train_chars: int, valid_chars: int, test_chars: int):
    need = train_chars + valid_chars + test_chars
    if len(text) < need:
        raise ValueError(
            f"the input has {len(text)} characters, fewer than train+valid+test = {need}"
        )
    a, b = train_chars, train_chars + valid_chars
    return text[:a], text[a:b], text[b : b + test_chars]


def vocabulary(train_words, min_count: int):
    counts = collections.Counter(train_words)
    return {w for w, c in counts.items() if c > min_count}


def map_unk(words, vocab):
    return [w if w in vocab else UNK for w in words]


def lines_of(words, words_per_line: int):
    return [" ".join(words[i : i + words_per_line]) for i in range(0, len(words), words_per_line)]


def prepare(
    text: str,
    outdir: str,
    train_chars=90_000_000,
    valid_chars=5_000_000,
    test_chars=5_000_000,
    min_count=10,
    words_per_line=1000,
) -> dict:
    parts = split_chars(text, train_chars, valid_chars, test_chars)
    words = [p.split() for p in parts]
    vocab = vocabulary(words[0], min_count)
    os.makedirs(outdir, exist_ok=True)
    stats = {"vocabulary": len(vocab) + 1, "min_count": min_count, "words_per_line": words_per_line}
    for name, ws in zip(("train", "valid", "test"), words):
        mapped = map_unk(ws, vocab)
        lines = lines_of(mapped, words_per_line)
        tmp = os.path.join(outdir, f"{name}.txt.part")
        with open(tmp, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
        os.replace(tmp, os.path.join(outdir, f"{name}.txt"))
        stats[name] = {"words": len(mapped), "unk": mapped.count(UNK), "lines": len(lines)}
    with open(os.path.join(outdir, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    return stats


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="text8 or text8.zip")
    p.add_argument("--outdir", required=True)
    p.add_argument("--train-chars", type=int, default=90_000_000)
    p.add_argument("--valid-chars", type=int, default=5_000_000)
    p.add_argument("--test-chars", type=int, default=5_000_000)
    p.add_argument(
        "--min-count",
        type=int,
        default=10,
        help="words seen this many times or fewer in train become <unk> (default 10)",
    )
    p.add_argument("--words-per-line", type=int, default=1000)
    args = p.parse_args(argv)
    try:
        text = read_stream(args.input)
        stats = prepare(
            text,
            args.outdir,
            args.train_chars,
            args.valid_chars,
            args.test_chars,
            args.min_count,
            args.words_per_line,
        )
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        print(f"prepare_text8.py: {e}", file=sys.stderr)
        return 1
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
