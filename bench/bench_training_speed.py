#!/usr/bin/env python
"""Training speed with ``kn`` noising divided by training speed without (words/s ratio), on PTB.

Same model (``--arch``, default ``noising_lstm_lm_small``: Zaremba's small LSTM, 2 x 200 units),
same data, same flags:
``--batch-size 20 --required-batch-size-multiple 1 --tokens-per-sample 35 --cpu
--num-workers 0``; the only difference is ``--noise-scheme kn --noise-gamma 0.2`` against
``--noise-scheme none``.

Two measurements (``--mode``, default ``both``):

``inprocess`` (the headline figure on a shared machine)
    One process, one fairseq ``Trainer``; two batch iterators over the same training split, built
    exactly as ``fairseq-train`` builds them (``task.get_batch_iterator`` with the run's
    ``--data-buffer-size``, ``--num-workers 0``): one over the noised dataset, one over the clean
    dataset it wraps. The loop alternates the two update by update (``--block 1``), timing
    ``next(batch) + trainer.train_step([batch])`` (fetching, collating and noising happen inside
    ``next``, as in ``fairseq-train``). Background load from other users hits both conditions
    alike; the headline is the median over adjacent (noised, clean) pairs of the ratio of their
    times, with a bootstrap 95% interval.
``cli`` (closest to what users see)
    ``fairseq-train`` runs, parsing the ``wps`` of every ``train_inner`` json log line but the
    first (warm-up) one: the kn and none runs of a pair side by side, one thread each, so that
    they share the same load (one run after the other measures the load's changes instead,
    bench/README.md).

The in-process mode also times the noising cost alone (fetching a batch's examples through the
noised wrapper and collating them, minus the same through the clean dataset), and prints the ratio
it implies, ``step / (step + noise cost)``, for the median and for the fastest clean steps. On a
loaded machine the end-to-end ratios scatter by several percent; this decomposition is far more
precise, since fetching through the wrapper and its collater are the only per-update code that
differs between the two runs.

Run: ``.venv/bin/python bench/bench_training_speed.py [--ptb-dir DIR] [--mode inprocess]``.
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402


def train_args(
    data_bin, scheme, max_update, log_interval, seed, arch="noising_lstm_lm_small", device="cpu"
):
    noise = (
        ["--noise-scheme", "kn", "--noise-gamma", "0.2"]
        if scheme == "kn"
        else ["--noise-scheme", "none"]
    )
    return [
        str(data_bin),
        "--user-dir",
        str(_common.PLUGIN_DIR),
        "--task",
        "noised_language_modeling",
        *noise,
        "--arch",
        arch,
        "--batch-size",
        "20",
        "--required-batch-size-multiple",
        "1",
        "--tokens-per-sample",
        "35",
        "--sample-break-mode",
        "none",
        "--optimizer",
        "sgd",
        "--lr",
        "1.0",
        "--clip-norm",
        "5",
        "--criterion",
        "cross_entropy",
        "--max-update",
        str(max_update),
        *(["--cpu"] if device == "cpu" else []),
        "--num-workers",
        "0",
        "--log-format",
        "json",
        "--log-interval",
        str(log_interval),
        "--no-save",
        "--disable-validation",
        "--seed",
        str(seed),
    ]


def fmt_stats(values, unit=""):
    if not values:
        return "n/a"
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return (
        f"median {statistics.median(values):.4g}{unit} (IQR {q[0]:.4g}-{q[2]:.4g}, n={len(values)})"
    )


# --------------------------------------------------------------------------------------------
# in-process
# --------------------------------------------------------------------------------------------


def run_inprocess(args, data_bin):
    import numpy as np
    import torch
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    from fairseq_noising.data.noised_dataset import NoisedDataset

    if args.threads:
        torch.set_num_threads(args.threads)
    parser = options.get_training_parser()
    cli_args = options.parse_args_and_arch(
        parser,
        input_args=train_args(data_bin, "kn", 10**9, 10**9, args.seed, args.arch, args.device),
    )
    cfg = convert_namespace_to_omegaconf(cli_args)
    utils.import_user_module(cfg.common)
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    task.load_dataset(cfg.dataset.train_subset, epoch=1)
    noised = task.dataset(cfg.dataset.train_subset)
    assert isinstance(noised, NoisedDataset), type(noised)
    clean = noised.dataset
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)

    def iterator(dataset):
        epoch_itr = task.get_batch_iterator(
            dataset=dataset,
            max_tokens=cfg.dataset.max_tokens,
            max_sentences=cfg.dataset.batch_size,
            max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
            ignore_invalid_inputs=True,
            required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
            seed=cfg.common.seed,
            num_workers=cfg.dataset.num_workers,
            epoch=1,
            data_buffer_size=cfg.dataset.data_buffer_size,
            disable_iterator_cache=True,
        )
        return epoch_itr.next_epoch_itr(shuffle=True)

    itrs = {"kn": iterator(noised), "none": iterator(clean)}
    times = {"kn": [], "none": []}
    block_means = {"kn": [], "none": []}
    words = 20 * 35

    def step(condition):
        start = time.perf_counter()
        sample = next(itrs[condition])
        trainer.train_step([sample])
        return time.perf_counter() - start

    for _ in range(args.warmup):  # first steps allocate, fill the data buffer, warm caches
        step("kn")
        step("none")
    print(
        f"in-process: {args.blocks} blocks of {args.block} updates per condition, alternating "
        f"(after {args.warmup} warm-up updates each); torch threads {torch.get_num_threads()}",
        flush=True,
    )
    start_all = time.perf_counter()
    for b in range(args.blocks):
        order = ("kn", "none") if b % 2 == 0 else ("none", "kn")
        for condition in order:
            block = [step(condition) for _ in range(args.block)]
            times[condition].extend(block)
            block_means[condition].append(sum(block) / len(block))
    elapsed = time.perf_counter() - start_all

    # The noising cost alone, on the same batches: fetching the examples through the noised
    # wrapper and collating them (which noises) minus the same through the clean dataset.
    indices = list(range(0, len(clean), max(1, len(clean) // 400)))[:400]
    batches_idx = [indices[i : i + 20] for i in range(0, len(indices), 20)]
    cost = []
    for _ in range(5):
        for idx in batches_idx:
            t0 = time.perf_counter()
            clean.collater([clean[i] for i in idx])
            t1 = time.perf_counter()
            noised.collater([noised[i] for i in idx])
            t2 = time.perf_counter()
            cost.append((t2 - t1) - (t1 - t0))
    noise_cost = statistics.median(cost)

    wps = {c: [words / t for t in times[c]] for c in times}
    pair_ratios = [block_means["none"][i] / block_means["kn"][i] for i in range(args.blocks)]
    med_ratio = statistics.median(times["none"]) / statistics.median(times["kn"])
    mean_ratio = (sum(times["none"]) / len(times["none"])) / (sum(times["kn"]) / len(times["kn"]))
    pair_median = statistics.median(pair_ratios)
    rng = np.random.default_rng(0)
    boot = np.median(rng.choice(np.asarray(pair_ratios), size=(2000, len(pair_ratios))), axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    clean_step = statistics.median(times["none"])
    fast_step = float(np.percentile(times["none"], 5))
    print(f"  words/s with kn   : {fmt_stats(wps['kn'])}")
    print(f"  words/s without   : {fmt_stats(wps['none'])}")
    print(
        f"  ratio kn / none, median of adjacent pairs : {pair_median:.4f} "
        f"(bootstrap 95% CI {low:.4f}-{high:.4f}; pair IQR "
        f"{statistics.quantiles(pair_ratios, n=4)[0]:.3f}-{statistics.quantiles(pair_ratios, n=4)[2]:.3f})"
    )
    print(f"  ratio kn / none, median step times        : {med_ratio:.4f}")
    print(f"  ratio kn / none, mean step times          : {mean_ratio:.4f}")
    print(
        f"  noising cost per batch (fetch + collate, noised minus clean): {noise_cost * 1e3:.3f} ms"
    )
    print(
        f"    = {noise_cost / clean_step:.3%} of the median clean step ({clean_step * 1e3:.1f} ms): "
        f"implied ratio {clean_step / (clean_step + noise_cost):.4f}"
    )
    print(
        f"    = {noise_cost / fast_step:.3%} of the fastest clean steps (5th percentile, "
        f"{fast_step * 1e3:.1f} ms): implied ratio {fast_step / (fast_step + noise_cost):.4f}"
    )
    print(f"  (timed part {elapsed:.0f} s)")
    return pair_median


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

WPS_LINE = re.compile(r"\| train_inner \| (\{.*\})\s*$")


def _wps_of(output: str):
    logs = [json.loads(m.group(1)) for line in output.splitlines() if (m := WPS_LINE.search(line))]
    wps = [float(entry["wps"]) for entry in logs][1:]
    if not wps:
        sys.exit(
            "error: no train_inner log line after the warm-up interval; raise --max-update "
            "or lower --log-interval"
        )
    return wps


def run_cli(args, data_bin):
    """fairseq-train runs, each (kn, none) pair started together (``_common.start``), so that both
    see the same background load."""
    threads = str(args.threads or 1)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    results = {"kn": [], "none": []}
    pair_ratios = []
    print(
        f"cli: {args.pairs} pair(s) kn+none side by side; --max-update {args.max_update} "
        f"--log-interval {args.log_interval}, first interval skipped; OMP_NUM_THREADS={threads}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-train-") as workdir:
        for _ in range(args.pairs):
            start, procs, medians = time.perf_counter(), {}, {}
            try:
                for condition in ("kn", "none"):
                    cmd = [_common.cli("fairseq-train")] + train_args(
                        data_bin,
                        condition,
                        args.max_update,
                        args.log_interval,
                        args.seed,
                        args.arch,
                        args.device,
                    )
                    out = tempfile.TemporaryFile(mode="w+", dir=workdir)
                    procs[condition] = (_common.start(cmd, env=env, cwd=workdir, stdout=out), out)
                for condition, (proc, out) in procs.items():
                    proc.wait()
                    out.seek(0)
                    output = out.read()
                    if proc.returncode != 0:
                        sys.exit(
                            f"error: fairseq-train ({condition}) exited {proc.returncode}:\n"
                            f"{output[-3000:]}"
                        )
                    wps = _wps_of(output)
                    results[condition].extend(wps)
                    medians[condition] = statistics.median(wps)
                    print(
                        f"  {condition:>4}: wps per interval {', '.join(f'{w:.0f}' for w in wps)}"
                        f"  (run ended after {time.perf_counter() - start:.0f} s)",
                        flush=True,
                    )
            finally:
                _common.stop([proc for proc, _ in procs.values()])
                for _, out in procs.values():
                    out.close()
            pair_ratios.append(medians["kn"] / medians["none"])
    ratio = statistics.median(results["kn"]) / statistics.median(results["none"])
    print(f"  words/s with kn   : {fmt_stats(results['kn'])}")
    print(f"  words/s without   : {fmt_stats(results['none'])}")
    print(f"  ratio kn / none (medians of all intervals): {ratio:.4f}")
    print(f"  ratio per pair of runs: {', '.join(f'{r:.4f}' for r in pair_ratios)}")
    return ratio


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _common.add_ptb_argument(parser)
    parser.add_argument("--mode", choices=("inprocess", "cli", "both"), default="both")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="in-process: torch threads (0: torch's default, as fairseq-train); cli: each run's "
        "OMP threads (0: 1)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--arch", default="noising_lstm_lm_small", help="model architecture (default %(default)s)"
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: train on the GPU (no --cpu flag) (default %(default)s)",
    )
    g = parser.add_argument_group("in-process")
    g.add_argument(
        "--blocks", type=int, default=100, help="blocks per condition (default %(default)s)"
    )
    g.add_argument(
        "--block",
        type=int,
        default=1,
        help="updates per block (default %(default)s: strict alternation)",
    )
    g.add_argument("--warmup", type=int, default=5, help="warm-up updates per condition")
    g = parser.add_argument_group("cli")
    g.add_argument(
        "--pairs", type=int, default=2, help="(kn, none) run pairs (default %(default)s)"
    )
    g.add_argument("--max-update", type=int, default=120)
    g.add_argument("--log-interval", type=int, default=20)
    args = parser.parse_args(argv)

    data_bin = _common.binarized_ptb(args.ptb_dir, args.cache_dir)
    print(f"# {_common.machine_line()}")
    print(f"# model: --arch {args.arch}, {args.device}; data {data_bin}")
    ratios = {}
    if args.mode in ("inprocess", "both"):
        ratios["in-process"] = run_inprocess(args, data_bin)
    if args.mode in ("cli", "both"):
        ratios["fairseq-train, kn and none side by side"] = run_cli(args, data_bin)
    print()
    for name, ratio in ratios.items():
        print(f"words/s ratio kn / none ({name}): {ratio:.4f}   goal >= 0.97")
    print(f"# finished {_common.machine_line()}")


if __name__ == "__main__":
    main()
