"""Time to build the bigram statistics (``stream_stats``) on PTB and on a Text8-sized stream.

Best of ``--repeats``: PTB's training stream; an i.i.d. Zipfian stream of Text8's 17,005,207
tokens (more distinct bigrams than real text: a pessimistic stand-in); and ``load_or_build_stats``
on PTB without the cache, then with it (what every later fairseq-train run pays).
"""

import argparse
import functools
import os
import shutil
import tempfile
import time

import numpy as np

from . import _common

TEXT8_TOKENS = 17_005_207


def best_of(repeats, fn):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), times, result


def zipf_stream(num_tokens, vocab_size, exponent, seed):
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, vocab_size + 1, dtype=np.float64) ** exponent
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    draws = np.searchsorted(cdf, rng.random(num_tokens), side="right")
    return np.minimum(draws, vocab_size - 1).astype(np.int64)


def fmt(times):
    return ", ".join(f"{t:.3f}" for t in times)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench_stats", description=__doc__.split("\n")[0])
    _common.add_ptb_argument(parser)
    parser.add_argument("--repeats", type=int, default=3, help="best of N (default %(default)s)")
    parser.add_argument("--synthetic-tokens", type=int, default=TEXT8_TOKENS)
    parser.add_argument("--synthetic-vocab", type=int, default=42_000)
    parser.add_argument("--zipf-exponent", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    data_bin = _common.binarized_ptb(args.ptb_dir, args.cache_dir)
    from fairseq_noising.ngram_stats import stream_stats
    from fairseq_noising.stats_cache import cache_path, load_or_build_stats

    tokens, dictionary, dataset = _common.ptb_train_stream(data_bin)
    print(f"# {_common.machine_line()}")

    best, times, stats = best_of(args.repeats, lambda: stream_stats(tokens, len(dictionary)))
    bigram_types = int(stats.distinct_successors.sum())
    print(
        f"stream_stats PTB: {tokens.size:,} tokens, V={len(dictionary)}, {bigram_types:,} bigram "
        f"types: best {best:.3f} s (runs {fmt(times)})   goal < 1 s"
    )

    t0 = time.perf_counter()
    synthetic = zipf_stream(
        args.synthetic_tokens, args.synthetic_vocab, args.zipf_exponent, args.seed
    )
    gen_s = time.perf_counter() - t0
    best, times, stats = best_of(
        args.repeats, functools.partial(stream_stats, synthetic, args.synthetic_vocab)
    )
    bigram_types = int(stats.distinct_successors.sum())
    print(
        f"stream_stats Zipf({args.zipf_exponent}) synthetic: {synthetic.size:,} tokens, "
        f"V={args.synthetic_vocab:,}, {bigram_types:,} bigram types, seed {args.seed}: best "
        f"{best:.3f} s (runs {fmt(times)})   goal < 10 s   [generating it took {gen_s:.1f} s, "
        "not timed]"
    )
    del synthetic, stats

    # the cache is written next to the data: a private copy leaves the shared one alone
    from fairseq.data import data_utils

    with tempfile.TemporaryDirectory(prefix="bench-stats-", dir=args.cache_dir) as tmp:
        for suffix in (".bin", ".idx"):
            shutil.copy(data_bin / f"train{suffix}", os.path.join(tmp, f"train{suffix}"))
        prefix = os.path.join(tmp, "train")
        copy = data_utils.load_indexed_dataset(prefix, dictionary, "mmap")
        cold = []
        for _ in range(args.repeats):
            if os.path.exists(cache_path(prefix)):
                os.remove(cache_path(prefix))
            start = time.perf_counter()
            load_or_build_stats(prefix, copy, dictionary, "stream")
            cold.append(time.perf_counter() - start)
        warm = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            load_or_build_stats(prefix, copy, dictionary, "stream")
            warm.append(time.perf_counter() - start)
        size = os.path.getsize(cache_path(prefix))
    print(
        f"load_or_build_stats PTB, no cache (hash + count + write): best {min(cold):.3f} s "
        f"(runs {fmt(cold)})"
    )
    print(
        f"load_or_build_stats PTB, cached (hash + read {size / 1e6:.1f} MB npz): best "
        f"{min(warm):.3f} s (runs {fmt(warm)})"
    )


if __name__ == "__main__":
    main()
