"""Time to build the bigram statistics (``stream_stats``) on PTB and on a Text8-sized stream.

Best of ``--repeats``, also of ``load_or_build_stats`` on PTB without and with its cache; the
Zipfian stream is i.i.d., a pessimistic stand-in for real text (bench/README.md, section 2).
"""

import os
import shutil
import tempfile
import time

import numpy as np

from . import _common

TEXT8_TOKENS = 17_005_207


ZIPF_VOCAB, ZIPF_EXPONENT, ZIPF_SEED = 42_000, 1.0, 0


def best_of(repeats, fn, before=lambda: None):
    """(best time, all times, last result) of ``repeats`` calls of ``fn``, each after ``before``."""
    times, result = [], None
    for _ in range(repeats):
        before()
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

    def report(what, built, goal="", seed=""):
        best, times, stats = built
        types = "" if stats is None else f", {int(stats.distinct_successors.sum()):,} bigram types"
        runs = ", ".join(f"{t:.3f}" for t in times)
        print(f"{what}{types}{seed}: best {best:.3f} s (runs {runs}){goal}")

    built = best_of(args.repeats, lambda: stream_stats(tokens, len(dictionary)))
    report(f"stream_stats PTB: {tokens.size:,} tokens, V={len(dictionary)}", built, "   goal < 1 s")
    t0 = time.perf_counter()
    synthetic = zipf_stream(args.synthetic_tokens, ZIPF_VOCAB, ZIPF_EXPONENT, ZIPF_SEED)
    gen_s = time.perf_counter() - t0
    report(
        f"stream_stats Zipf({ZIPF_EXPONENT}) synthetic: {synthetic.size:,} tokens, "
        f"V={ZIPF_VOCAB:,}",
        best_of(args.repeats, lambda: stream_stats(synthetic, ZIPF_VOCAB)),
        f"   goal < 10 s   [generating it took {gen_s:.1f} s, not timed]",
        f", seed {ZIPF_SEED}",
    )

    # the cache is written next to the data: a private copy leaves the shared one alone
    with tempfile.TemporaryDirectory(prefix="bench-stats-", dir=args.cache_dir) as tmp:
        for suffix in (".bin", ".idx"):
            shutil.copy(data_bin / f"train{suffix}", os.path.join(tmp, f"train{suffix}"))
        prefix = os.path.join(tmp, "train")
        copy = data_utils.load_indexed_dataset(prefix, dictionary, "mmap")

        def build():
            load_or_build_stats(read_split(prefix, copy), dictionary, "stream")

        def uncache():
            if os.path.exists(cache_path(prefix)):
                os.remove(cache_path(prefix))

        cold = best_of(args.repeats, build, uncache)
        warm = best_of(args.repeats, build)
        size = os.path.getsize(cache_path(prefix))
    report("load_or_build_stats PTB, no cache (hash + count + write)", cold)
    report(f"load_or_build_stats PTB, cached (hash + read {size / 1e6:.1f} MB npz)", warm)


if __name__ == "__main__":
    main()
