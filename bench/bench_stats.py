"""Time to build the bigram statistics (``stream_stats``) on PTB and on a Text8-sized stream."""

import os
import shutil
import tempfile
import time

import numpy as np

from . import _common

TEXT8_TOKENS, ZIPF_VOCAB, ZIPF_EXPONENT, ZIPF_SEED = 17_005_207, 42_000, 1.0, 0


def best_of(repeats, fn, before=lambda: None):
    """(best time, all times, last result) of ``repeats`` calls of ``fn``, each after ``before``."""
    times, result = [], None
    for _ in range(repeats):
        before()
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), times, result


def report(what, built, goal="", seed=""):
    best, times, stats = built
    types = "" if stats is None else f", {int(stats.distinct_successors.sum()):,} bigram types"
    runs = ", ".join(f"{t:.3f}" for t in times)
    print(f"{what}{types}{seed}: best {best:.3f} s (runs {runs}){goal}")


def main(argv=None):
    parser = _common.parser("bench_stats", __doc__)
    parser.add_argument("--repeats", type=int, default=3, help="best of N (default %(default)s)")
    parser.add_argument("--synthetic-tokens", type=int, default=TEXT8_TOKENS)
    args = parser.parse_args(argv)
    data_bin = _common.binarized_ptb(args.ptb_dir, args.cache_dir)
    from fairseq.data import data_utils

    from fairseq_noising.ngram_stats import stream_stats
    from fairseq_noising.stats_cache import cache_path, load_or_build_stats, read_split

    tokens, dictionary, _ = _common.ptb_train_stream(data_bin)
    print(f"# {_common.machine_line()}")
    built = best_of(args.repeats, lambda: stream_stats(tokens, len(dictionary)))
    report(f"stream_stats PTB: {tokens.size:,} tokens, V={len(dictionary)}", built, "   goal < 1 s")
    t0 = time.perf_counter()  # an i.i.d. Zipfian stream: more bigram types than real text
    cdf = np.cumsum(1.0 / np.arange(1, ZIPF_VOCAB + 1, dtype=np.float64) ** ZIPF_EXPONENT)
    uniform = np.random.default_rng(ZIPF_SEED).random(args.synthetic_tokens)
    draws = np.searchsorted(cdf / cdf[-1], uniform, side="right")
    synthetic = np.minimum(draws, ZIPF_VOCAB - 1).astype(np.int64)
    gen_s = time.perf_counter() - t0
    zipf = (
        f"stream_stats Zipf({ZIPF_EXPONENT}) synthetic: {synthetic.size:,} tokens, V={ZIPF_VOCAB:,}"
    )
    built = best_of(args.repeats, lambda: stream_stats(synthetic, ZIPF_VOCAB))
    goal = f"   goal < 10 s   [generating it took {gen_s:.1f} s, not timed]"
    report(zipf, built, goal, f", seed {ZIPF_SEED}")
    # the cache is written next to the data: a private copy leaves the shared one alone
    with tempfile.TemporaryDirectory(prefix="bench-stats-", dir=args.cache_dir) as tmp:
        prefix = os.path.join(tmp, "train")
        for suffix in (".bin", ".idx"):
            shutil.copy(data_bin / f"train{suffix}", prefix + suffix)
        copy = data_utils.load_indexed_dataset(prefix, dictionary, "mmap")

        def build():
            load_or_build_stats(read_split(prefix, copy), dictionary, "stream")

        def uncache():
            if os.path.exists(cache_path(prefix)):
                os.remove(cache_path(prefix))

        cold, warm = best_of(args.repeats, build, uncache), best_of(args.repeats, build)
        size = os.path.getsize(cache_path(prefix))
    report("load_or_build_stats PTB, no cache (hash + count + write)", cold)
    report(f"load_or_build_stats PTB, cached (hash + read {size / 1e6:.1f} MB npz)", warm)


if __name__ == "__main__":
    main()
