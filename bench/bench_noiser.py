#!/usr/bin/env python
"""Noiser throughput (tokens/s) on PTB batches of 20 x 35, against the authors' per-token loop.

Batches are laid out as in the authors' code and fairseq's language modeling: the training stream
(one ``</s>`` per line, 929,589 tokens) is cut into 20 rows; batch i is the context
``X = rows[:, 35 i : 35 (i+1)]`` and the targets ``Y`` shifted by one.

Figures printed:

* ``plugin``: :class:`fairseq_noising.noiser.Noiser` with ``build_scheme(...)`` on the real PTB
  statistics, per batch including ``positions_in_example`` (what the collater does);
* ``plugin+torch``: the full collater step, ``noise_lm_batch`` on a torch batch dict;
* ``authors``: a faithful Python 3 port of ``noise_batch`` in the authors' public code
  (stanfordmlgroup/nlm-noising, ``loader.py``), bigram KN branch: a Python loop over rows and
  columns; per token an ``id_to_token`` look-up, the ``continuations["total"|"distinct"]`` dict
  look-ups keyed by a one-token tuple, ``p = (gamma / total) * distinct``,
  ``np.random.binomial(1, p)``, and when it fires two draws ``bisect.bisect(cumsum,
  np.random.random() * cumsum[-1])`` from q(x) ~ N1+(., x) (their ``sample_index``);
* ``alg1-choice``: Algorithm 1 taken literally with ``np.random.random() < gamma`` and
  ``np.random.choice(V, p=q)`` for each replacement (slower than the authors' code, because
  ``choice`` re-checks and re-sums q over the whole vocabulary at every call; shown for reference
  only -- the headline ratio is against the faithful port, the conservative baseline).

The implementations run in ``--rounds`` alternating rounds (on a shared machine, interleaving
exposes them to the same background load); tokens/s is reported from the median per-batch time,
next to the best whole pass. ``--stack N`` also times the plugin on N batches stacked in one call,
which separates numpy's per-call overhead from the per-token cost.

Run: ``.venv/bin/python bench/bench_noiser.py [--ptb-dir DIR]``.
"""

import argparse
import bisect
import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
import numpy as np  # noqa: E402

BATCH, UNROLL = 20, 35


def batches(tokens: np.ndarray):
    """The authors' ``_reshape_data`` + ``get_batch``: list of (X, Y) int arrays [20, 35]."""
    batch_len = tokens.shape[0] // BATCH
    data = tokens[: BATCH * batch_len].reshape(BATCH, batch_len)
    n = (batch_len - 1) // UNROLL
    return [
        (data[:, i * UNROLL : (i + 1) * UNROLL], data[:, i * UNROLL + 1 : (i + 1) * UNROLL + 1])
        for i in range(n)
    ]


# --------------------------------------------------------------------------------------------
# Baseline 1: faithful port of the authors' noise_batch (bigram KN branch), Python 3.
# --------------------------------------------------------------------------------------------


class AuthorsLoader:
    """The look-up tables the authors' ``TextLoader`` holds, built from the same PTB stream."""

    def __init__(self, tokens: np.ndarray, dictionary):
        self.id_to_token = {i: sym for i, sym in enumerate(dictionary.symbols)}
        words = [self.id_to_token[int(t)] for t in tokens]
        bigrams = defaultdict(int)  # their bigram_counts (nltk.FreqDist over nltk.bigrams)
        for pair in zip(words[:-1], words[1:]):
            bigrams[pair] += 1
        total, distinct = defaultdict(int), defaultdict(int)  # their build_continuations
        for key, count in bigrams.items():
            context = key[:-1]
            total[context] += count
            distinct[context] += 1
        self.continuations = {"total": total, "distinct": distinct}
        hist = defaultdict(set)  # their _build_vocab: number of distinct histories N1+(., x)
        for prev, word in bigrams:
            hist[word].add(prev)
        hist_counts = np.array(
            [len(hist.get(sym, ())) for sym in dictionary.symbols], dtype=np.float64
        )
        self.hist_freqs = hist_counts / hist_counts.sum()
        self.hist_freqs_cumsum = np.cumsum(self.hist_freqs)


def sample_index(ps_cumsum):
    return bisect.bisect(ps_cumsum, np.random.random() * ps_cumsum[-1])


def authors_noise_batch_kn(x, y, loader, gamma):
    """``noise_batch`` with flags.absolute_discounting, scheme "ngram", ngram_scheme "bgkn"."""
    if gamma == 0.0:
        return x, y
    continuations = loader.continuations
    x_, y_ = np.array(x), np.array(y)
    for row in range(x.shape[0]):
        for col in range(x.shape[1]):
            context = list()
            context.append(loader.id_to_token[x[row, col]])
            total, distinct = (
                continuations["total"][tuple(context)],
                continuations["distinct"][tuple(context)],
            )
            p = (gamma / total) * distinct
            draw = np.random.binomial(1, p)
            if draw:
                x_[row, col] = sample_index(loader.hist_freqs_cumsum)
                y_[row, col] = sample_index(loader.hist_freqs_cumsum)
    return x_, y_


# --------------------------------------------------------------------------------------------
# Baseline 2: Algorithm 1 literally, np.random.choice(V, p=q) per replacement.
# --------------------------------------------------------------------------------------------


def alg1_choice_kn(x, y, gamma_of, q, vocab_size):
    x_, y_ = np.array(x), np.array(y)
    for row in range(x.shape[0]):
        for col in range(x.shape[1]):
            gamma = gamma_of[x[row, col]]
            if np.random.random() < gamma:
                x_[row, col] = np.random.choice(vocab_size, p=q)
                y_[row, col] = np.random.choice(vocab_size, p=q)
    return x_, y_


# --------------------------------------------------------------------------------------------


class Timer:
    """Per-batch wall times of several implementations, measured in alternating rounds.

    On a shared machine, interleaving the implementations round by round exposes them to the
    same background load, and the median batch time ignores the batches a neighbour preempted.
    """

    def __init__(self):
        self.times = {}
        self.fired = {}
        self.best_pass = {}

    def run(self, label, fn, work, per_item=1):
        """Times ``fn`` on each item of ``work``; an item holds ``per_item`` batches."""
        times = self.times.setdefault(label, [])
        fired = 0
        clock = time.perf_counter
        start = clock()
        for item in work:
            t0 = clock()
            fired += fn(item)
            times.append((clock() - t0) / per_item)
        tokens = len(work) * per_item * BATCH * UNROLL
        rate = tokens / (clock() - start)
        self.best_pass[label] = max(self.best_pass.get(label, 0.0), rate)
        self.fired[label] = fired / tokens

    def median_rate(self, label):
        return BATCH * UNROLL / float(np.median(self.times[label]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _common.add_ptb_argument(parser)
    parser.add_argument("--gamma", type=float, default=0.2, help="gamma_0 (default %(default)s)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=7,
        help="alternating rounds; every implementation runs once per round (default %(default)s)",
    )
    parser.add_argument(
        "--plugin-batches",
        type=int,
        default=200,
        help="batches per round for each plugin scheme (default %(default)s); successive rounds "
        "take successive windows of the PTB epoch (1,327 batches)",
    )
    parser.add_argument(
        "--loop-batches",
        type=int,
        default=50,
        help="batches per round of the authors' per-token loop (default %(default)s)",
    )
    parser.add_argument(
        "--stack",
        type=int,
        default=64,
        help="also time the plugin on calls of this many batches stacked into one array, to show "
        "the per-call overhead (default %(default)s; 0 skips it)",
    )
    parser.add_argument(
        "--choice-batches",
        type=int,
        default=5,
        help="batches per round of the np.random.choice loop (default %(default)s; 0 skips it)",
    )
    args = parser.parse_args(argv)

    data_bin = _common.binarized_ptb(args.ptb_dir, args.cache_dir)
    import torch

    from fairseq_noising.data.batch_noising import noise_lm_batch
    from fairseq_noising.ngram_stats import stream_stats
    from fairseq_noising.noiser import Noiser, positions_in_example
    from fairseq_noising.schemes import SCHEMES, build_scheme
    from fairseq_noising.tasks.noising_config import BLANK_SYMBOL, special_ids

    torch.set_num_threads(1)
    tokens, dictionary, _ = _common.ptb_train_stream(data_bin)
    vocab_size = len(dictionary)
    stats = stream_stats(tokens, vocab_size)
    pad = dictionary.pad()
    blank = dictionary.index(BLANK_SYMBOL)
    all_batches = batches(tokens)

    def make_noiser(name):
        scheme = build_scheme(name, stats, args.gamma, special_ids(dictionary), blank, vocab_size)
        return Noiser(scheme, seed=1)

    noisers = {name: make_noiser(name) for name in SCHEMES}
    kn = noisers["kn"]
    plugin_items = [
        (x, y, np.arange(BATCH, dtype=np.int64) + BATCH * i) for i, (x, y) in enumerate(all_batches)
    ]
    torch_items = [
        {
            "id": torch.from_numpy(ids),
            "net_input": {
                "src_tokens": torch.from_numpy(np.ascontiguousarray(x)),
                "src_lengths": torch.full((BATCH,), UNROLL),
            },
            "target": torch.from_numpy(np.ascontiguousarray(y)),
        }
        for x, y, ids in plugin_items
    ]

    stacked_items = []
    if args.stack > 0:
        for start in range(0, len(plugin_items) - args.stack + 1, args.stack):
            group = plugin_items[start : start + args.stack]
            stacked_items.append(tuple(np.concatenate([g[k] for g in group]) for k in range(3)))

    def plugin_fn(noiser):
        def run(item):
            x, y, ids = item
            result = noiser(x, y, ids, positions_in_example(x, pad), 1)
            return int(result.fired.sum())

        return run

    def torch_fn(batch):
        _, details = noise_lm_batch(batch, kn, 1, pad)
        return int(details["target"].fired.sum())

    t0 = time.perf_counter()
    loader = AuthorsLoader(tokens, dictionary)
    setup_s = time.perf_counter() - t0
    np.random.seed(1234)

    def authors_fn(item):
        x, y = item
        x_, _ = authors_noise_batch_kn(x, y, loader, args.gamma)
        return int((x_ != x).sum())  # replaced tokens (a draw may pick the same id: rare)

    # Algorithm 1 knows no special symbols: gamma for every id that has a successor, q = N1+(., x)
    gamma_of = np.clip(
        args.gamma
        * np.divide(
            stats.distinct_successors,
            stats.successor_total,
            out=np.zeros(vocab_size),
            where=stats.successor_total > 0,
        ),
        0.0,
        1.0,
    )
    q = stats.distinct_predecessors / stats.distinct_predecessors.sum()

    def choice_fn(item):
        x, y = item
        x_, _ = alg1_choice_kn(x, y, gamma_of, q, vocab_size)
        return int((x_ != x).sum())

    def window(items, size, r):
        start = (r * size) % len(items)
        return (items[start:] + items[:start])[:size]

    STACKED = f"plugin Noiser, kn, {args.stack} batches/call"
    KN, TORCH, AUTHORS, CHOICE = (
        "plugin Noiser, kn",
        "plugin noise_lm_batch, kn",
        "authors' loop (faithful port), kn",
        "Alg. 1 + np.random.choice, kn",
    )
    timer = Timer()
    print(f"# {_common.machine_line()}")
    print(
        f"# PTB train: {tokens.size:,} tokens, V={vocab_size}, {len(all_batches)} batches of "
        f"{BATCH}x{UNROLL}; gamma_0={args.gamma}; {args.rounds} alternating rounds"
    )
    wall = time.perf_counter()
    for r in range(args.rounds):
        for name in SCHEMES:
            timer.run(name, plugin_fn(noisers[name]), window(plugin_items, args.plugin_batches, r))
        timer.run(TORCH, torch_fn, window(torch_items, args.plugin_batches, r))
        if stacked_items:
            timer.run(STACKED, plugin_fn(kn), window(stacked_items, 2, r), args.stack)
        timer.run(AUTHORS, authors_fn, window(all_batches, args.loop_batches, r))
        if args.choice_batches > 0:
            timer.run(CHOICE, choice_fn, window(all_batches, args.choice_batches, r))
    timer.times[KN] = timer.times["kn"]
    timer.best_pass[KN], timer.fired[KN] = timer.best_pass["kn"], timer.fired["kn"]
    wall = time.perf_counter() - wall

    print()
    print(f"{'implementation':<36}{'tokens/s':>12}{'us/batch':>10}{'best pass':>12}{'fired':>8}")
    print(f"{'':<36}{'(median)':>12}{'(median)':>10}{'tokens/s':>12}")

    def line(label, shown=None):
        rate = timer.median_rate(label)
        print(
            f"{shown or label:<36}{rate:>12,.0f}{BATCH * UNROLL / rate * 1e6:>10.1f}"
            f"{timer.best_pass[label]:>12,.0f}{timer.fired[label]:>8.2%}"
        )

    for label in (KN, TORCH, AUTHORS) + ((CHOICE,) if args.choice_batches > 0 else ()):
        line(label)
    if stacked_items:
        line(STACKED)
    print()
    ratio = timer.median_rate(KN) / timer.median_rate(AUTHORS)
    print(
        f"ratio plugin Noiser / authors' loop (kn, gamma_0={args.gamma}): {ratio:.1f}x "
        f"(best passes: {timer.best_pass[KN] / timer.best_pass[AUTHORS]:.1f}x)   goal >= 20x"
    )
    print(
        f"ratio plugin noise_lm_batch / authors' loop:            "
        f"{timer.median_rate(TORCH) / timer.median_rate(AUTHORS):.1f}x"
    )
    if stacked_items:
        print(
            f"ratio plugin Noiser, {args.stack} batches per call / authors' loop: "
            f"{timer.median_rate(STACKED) / timer.median_rate(AUTHORS):.1f}x"
        )
    if args.choice_batches > 0:
        print(
            f"ratio plugin Noiser / Alg. 1 + np.random.choice:        "
            f"{timer.median_rate(KN) / timer.median_rate(CHOICE):.0f}x"
        )
    print(
        f"(per round: {args.plugin_batches} batches per plugin scheme, {args.loop_batches} for the "
        f"authors' loop, {args.choice_batches} for np.random.choice; authors' tables built in "
        f"{setup_s:.1f} s, not timed; timed part {wall:.1f} s)"
    )
    print()
    print("plugin Noiser, every scheme:")
    for name in SCHEMES:
        line(name, f"  {name}")


if __name__ == "__main__":
    main()
