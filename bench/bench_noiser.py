"""Noiser throughput (tokens/s) on PTB batches of 20 x 35, against the authors' per-token loop."""

import bisect
import time
from collections import defaultdict
from functools import partial

import numpy as np

from . import _common
from ._common import BATCH, BPTT

GAMMA, STACK = 0.2, 64  # STACK: batches stacked into one call
PLUGIN_BATCHES, LOOP_BATCHES, CHOICE_BATCHES = 200, 50, 5  # a round: each plugin scheme, ...


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
            total[key[:-1]] += count
            distinct[key[:-1]] += 1
        self.continuations = {"total": total, "distinct": distinct}
        hist = defaultdict(set)  # their _build_vocab: number of distinct histories N1+(., x)
        for prev, word in bigrams:
            hist[word].add(prev)
        counts = np.array([len(hist.get(sym, ())) for sym in dictionary.symbols], np.float64)
        self.hist_freqs_cumsum = np.cumsum(counts / counts.sum())


def sample_index(ps_cumsum):
    return bisect.bisect(ps_cumsum, np.random.random() * ps_cumsum[-1])


def authors_noise_batch_kn(x, y, loader, gamma):
    """The authors' ``noise_batch`` (nlm-noising's loader.py), bigram KN: their per-token work."""
    if gamma == 0.0:
        return x, y
    continuations = loader.continuations
    x_, y_ = np.array(x), np.array(y)
    for row in range(x.shape[0]):
        for col in range(x.shape[1]):
            context = list()
            context.append(loader.id_to_token[x[row, col]])
            total = continuations["total"][tuple(context)]
            distinct = continuations["distinct"][tuple(context)]
            p = (gamma / total) * distinct
            draw = np.random.binomial(1, p)
            if draw:
                x_[row, col] = sample_index(loader.hist_freqs_cumsum)
                y_[row, col] = sample_index(loader.hist_freqs_cumsum)
    return x_, y_


def alg1_choice_kn(x, y, gamma_of, q, vocab_size):
    """Algorithm 1 literally: ``np.random.choice(V, p=q)`` per replacement."""
    x_, y_ = np.array(x), np.array(y)
    for row in range(x.shape[0]):
        for col in range(x.shape[1]):
            if np.random.random() < gamma_of[x[row, col]]:
                x_[row, col] = np.random.choice(vocab_size, p=q)
                y_[row, col] = np.random.choice(vocab_size, p=q)
    return x_, y_


class Timer:
    """Per-batch times in rounds: the median ignores the batches a busy neighbour slowed."""

    def __init__(self):
        self.times, self.fired, self.best_pass = defaultdict(list), {}, defaultdict(float)

    def run(self, label, fn, items, size, r, per_item=1):
        """Times ``fn`` on round ``r``'s ``size`` items; an item holds ``per_item`` batches."""
        start = (r * size) % len(items)
        work, fired, clock = (items[start:] + items[:start])[:size], 0, time.perf_counter
        start = clock()
        for item in work:
            t0 = clock()
            fired += fn(item)
            self.times[label].append((clock() - t0) / per_item)
        tokens = len(work) * per_item * BATCH * BPTT
        self.best_pass[label] = max(self.best_pass[label], tokens / (clock() - start))
        self.fired[label] = fired / tokens

    def median_rate(self, label):
        return BATCH * BPTT / float(np.median(self.times[label]))

    def line(self, label, shown=None):
        rate, best, fired = self.median_rate(label), self.best_pass[label], self.fired[label]
        us = BATCH * BPTT / rate * 1e6
        print(f"{shown or label:<36}{rate:>12,.0f}{us:>10.1f}{best:>12,.0f}{fired:>8.2%}")


def main(argv=None):
    parser = _common.parser("bench_noiser", __doc__)
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (%(default)s)")
    args = parser.parse_args(argv)
    data_bin = _common.binarized_ptb(args.ptb_dir, args.cache_dir)
    import torch

    from fairseq_noising.data.batch_noising import noise_lm_batch
    from fairseq_noising.ngram_stats import stream_stats
    from fairseq_noising.noiser import Noiser, positions_in_example
    from fairseq_noising.noiser_factory import BLANK_SYMBOL, special_ids
    from fairseq_noising.schemes import SCHEMES, build_scheme

    torch.set_num_threads(1)
    tokens, dictionary, _ = _common.ptb_train_stream(data_bin)
    vocab_size, pad, blank = len(dictionary), dictionary.pad(), dictionary.index(BLANK_SYMBOL)
    stats = stream_stats(tokens, vocab_size)
    all_batches = _common.ptb_batches(tokens)
    specials = special_ids(dictionary)
    noisers = {
        name: Noiser(build_scheme(name, stats, GAMMA, specials, blank, vocab_size), seed=1)
        for name in SCHEMES
    }
    plugin_items = [(x, y, np.arange(BATCH) + BATCH * i) for i, (x, y) in enumerate(all_batches)]

    def torch_batch(x, y, ids):  # the collater's batch dict
        x, y = (torch.from_numpy(np.ascontiguousarray(a)) for a in (x, y))
        net_input = {"src_tokens": x, "src_lengths": torch.full((BATCH,), BPTT)}
        return {"id": torch.from_numpy(ids), "net_input": net_input, "target": y}

    torch_items = [torch_batch(*item) for item in plugin_items]
    stacked_items = [
        tuple(np.concatenate([g[k] for g in plugin_items[i : i + STACK]]) for k in range(3))
        for i in range(0, len(plugin_items) - STACK + 1, STACK)
    ]

    def plugin_fn(noiser, item):
        x, y, ids = item
        return int(noiser(x, y, ids, positions_in_example(x, pad), 1).fired.sum())

    def torch_fn(batch):
        return int(noise_lm_batch(batch, noisers["kn"], 1, pad)[1]["target"].fired.sum())

    t0 = time.perf_counter()
    loader = AuthorsLoader(tokens, dictionary)
    setup_s = time.perf_counter() - t0
    np.random.seed(1234)
    # Algorithm 1 knows no special symbols: gamma for every id that has a successor, q = N1+(., x)
    total = stats.successor_total
    share = np.divide(stats.distinct_successors, total, out=np.zeros(vocab_size), where=total > 0)
    gamma_of = np.clip(GAMMA * share, 0.0, 1.0)
    q = stats.distinct_predecessors / stats.distinct_predecessors.sum()

    def replaced(noise):  # tokens replaced (a draw may pick the same id: rare)
        return lambda item: int((noise(*item)[0] != item[0]).sum())

    authors = replaced(lambda x, y: authors_noise_batch_kn(x, y, loader, GAMMA))
    choice = replaced(lambda x, y: alg1_choice_kn(x, y, gamma_of, q, vocab_size))
    KN, TORCH = "plugin Noiser, kn", "plugin noise_lm_batch, kn"
    STACKED = f"plugin Noiser, kn, {STACK} batches/call"
    AUTHORS, CHOICE = "authors' loop (faithful port), kn", "Alg. 1 + np.random.choice, kn"
    timer = Timer()
    print(f"# {_common.machine_line()}")
    print(
        f"# PTB train: {tokens.size:,} tokens, V={vocab_size}, {len(all_batches)} batches of "
        f"{BATCH}x{BPTT}; gamma_0={GAMMA}; {args.rounds} alternating rounds"
    )
    wall = time.perf_counter()
    for r in range(args.rounds):
        for name in SCHEMES:
            noiser = partial(plugin_fn, noisers[name])
            timer.run(f"plugin Noiser, {name}", noiser, plugin_items, PLUGIN_BATCHES, r)
        timer.run(TORCH, torch_fn, torch_items, PLUGIN_BATCHES, r)
        timer.run(STACKED, partial(plugin_fn, noisers["kn"]), stacked_items, 2, r, STACK)
        timer.run(AUTHORS, authors, all_batches, LOOP_BATCHES, r)
        timer.run(CHOICE, choice, all_batches, CHOICE_BATCHES, r)
    wall = time.perf_counter() - wall
    print(f"\n{'implementation':<36}{'tokens/s':>12}{'us/batch':>10}{'best pass':>12}{'fired':>8}")
    print(f"{'':<36}{'(median)':>12}{'(median)':>10}{'tokens/s':>12}")
    for label in (KN, TORCH, AUTHORS, CHOICE, STACKED):
        timer.line(label)
    ratio = timer.median_rate(KN) / timer.median_rate(AUTHORS)
    print(
        f"\nratio plugin Noiser / authors' loop (kn, gamma_0={GAMMA}): {ratio:.1f}x "
        f"(best passes: {timer.best_pass[KN] / timer.best_pass[AUTHORS]:.1f}x)   goal >= 20x"
    )
    for text, label, base in (
        ("plugin noise_lm_batch / authors' loop:           ", TORCH, AUTHORS),
        (f"plugin Noiser, {STACK} batches per call / authors' loop:", STACKED, AUTHORS),
        ("plugin Noiser / Alg. 1 + np.random.choice:       ", KN, CHOICE),
    ):
        print(f"ratio {text} {timer.median_rate(label) / timer.median_rate(base):.1f}x")
    print(f"(authors' tables built in {setup_s:.1f} s, not timed; timed part {wall:.1f} s)")
    print("\nplugin Noiser, every scheme:")
    for name in SCHEMES:
        timer.line(f"plugin Noiser, {name}", f"  {name}")


if __name__ == "__main__":
    main()
