"""Text8 split as in Section 4.1 of the paper, into one-sentence-per-line text files: the first
90M characters train, the next 5M valid, the last 5M test (a cut may split a word); words seen 10
or fewer times in train become ``<unk>``; lines of 1000 words (fairseq's ``</s>`` adds 0.1%).

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
    """Writes ``train.txt``, ``valid.txt``, ``test.txt`` and ``stats.json`` into ``outdir``."""
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
