"""Training words/s on PTB batches of 20 x 35, two comparisons (bench/README.md, sections 3, 5).

``--mode inprocess|cli|both``: ``kn`` noising (gamma 0.2) against ``--noise-scheme none``, same
model (``--arch``) and flags. ``inprocess``, the headline on a shared machine: one fairseq Trainer,
its training iterator over the noised dataset and over the clean one inside it, alternated update
by update, plus the noising cost alone (fetch and collate, noised minus clean). ``cli``:
fairseq-train runs of kn and none side by side, one thread each, so that they share the load.

``--mode models``: the paper's LSTM (``noising``: noising_lstm_lm_medium, state carried) against
fairseq's ``lstm_lm`` of the same sizes (``stock``: an LSTMCell loop) and nn.Embedding + nn.LSTM +
nn.Linear (``plain``), in alternating rounds; then, on CUDA, the peak memory of one step.
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

from . import _common
from ._lstm_models import BATCH, BPTT, build_network, training_step

WPS_LINE = re.compile(r"\| train_inner \| (\{.*\})\s*$")


def alternate(steps, rounds, per_round, warmup, sync=lambda: None):
    """Seconds of each round of ``per_round`` calls of each step function, after ``warmup`` calls
    each; rounds alternate (ABBA) so that a slow spell of a shared machine hits all alike."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    for r in range(rounds):
        for name in list(steps)[:: 1 if r % 2 == 0 else -1]:
            sync()
            start = time.perf_counter()
            for _ in range(per_round):
                steps[name]()
            sync()
            times[name].append(time.perf_counter() - start)
    return times


def train_args(data_bin, scheme, args, max_update=10**9, log_interval=10**9):
    """fairseq-train's command line (without the program) of one condition."""
    noise = "--noise-scheme kn --noise-gamma 0.2" if scheme == "kn" else "--noise-scheme none"
    flags = (
        f"--task noised_language_modeling {noise} --arch {args.arch} --batch-size {BATCH} "
        f"--required-batch-size-multiple 1 --tokens-per-sample {BPTT} --sample-break-mode none "
        "--optimizer sgd --lr 1.0 --clip-norm 5 --criterion cross_entropy --num-workers 0 "
        "--log-format json --no-save --disable-validation --seed 1 "
        f"--max-update {max_update} --log-interval {log_interval}"
    ).split() + (["--cpu"] if args.device == "cpu" else [])
    return [str(data_bin), "--user-dir", str(_common.PLUGIN_DIR), *flags]


def fmt_stats(values):
    q = statistics.quantiles(values, n=4)
    return f"median {statistics.median(values):.4g} (IQR {q[0]:.4g}-{q[2]:.4g}, n={len(values)})"


def run_inprocess(args, data_bin):
    import numpy as np
    import torch
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    import fairseq_noising.fairseq_plugin  # noqa: F401  (registers the task before parsing)

    parsed = options.parse_args_and_arch(
        options.get_training_parser(), input_args=train_args(data_bin, "kn", args)
    )
    cfg = convert_namespace_to_omegaconf(parsed)
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task, subset = tasks.setup_task(cfg.task), cfg.dataset.train_subset
    task.load_dataset(subset, epoch=1)
    noised = task.dataset(subset)
    clean = noised.dataset
    trainer = Trainer(cfg, task, task.build_model(cfg.model), task.build_criterion(cfg.criterion))

    def step_over(dataset):  # the iterator fairseq-train builds; fetching, collating and noising
        task.datasets[subset] = dataset  # happen in next(), as in fairseq-train
        batches = trainer.get_train_iterator(epoch=1, load_dataset=False).next_epoch_itr()
        return lambda: trainer.train_step([next(batches)])

    steps = {"kn": step_over(noised), "none": step_over(clean)}
    task.datasets[subset] = noised
    warmup = 5 if args.warmup is None else args.warmup
    print(
        f"in-process: {args.blocks} updates per condition, alternating (after {warmup} warm-up "
        f"updates each); torch threads {torch.get_num_threads()}",
        flush=True,
    )
    times = alternate(steps, args.blocks, 1, warmup)

    # the noising cost alone: the same examples fetched through each dataset and collated
    indices = list(range(0, len(clean), max(1, len(clean) // 400)))[:400]
    cost = []
    for _ in range(5):
        for i in range(0, len(indices), BATCH):
            t0 = time.perf_counter()
            clean.collater([clean[j] for j in indices[i : i + BATCH]])
            t1 = time.perf_counter()
            noised.collater([noised[j] for j in indices[i : i + BATCH]])
            cost.append((time.perf_counter() - t1) - (t1 - t0))
    cost = statistics.median(cost)

    pairs = [none / kn for kn, none in zip(times["kn"], times["none"])]
    boot = np.median(np.random.default_rng(0).choice(pairs, size=(2000, len(pairs))), axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    q = statistics.quantiles(pairs, n=4)
    print(f"  words/s with kn   : {fmt_stats([BATCH * BPTT / t for t in times['kn']])}")
    print(f"  words/s without   : {fmt_stats([BATCH * BPTT / t for t in times['none']])}")
    print(
        f"  ratio kn / none, median of adjacent pairs : {statistics.median(pairs):.4f} (bootstrap "
        f"95% CI {low:.4f}-{high:.4f}; pair IQR {q[0]:.3f}-{q[2]:.3f})"
    )
    median_ratio = statistics.median(times["none"]) / statistics.median(times["kn"])
    print(f"  ratio kn / none, median step times        : {median_ratio:.4f}")
    print(
        f"  ratio kn / none, mean step times          : {sum(times['none']) / sum(times['kn']):.4f}"
    )
    print(f"  noising cost per batch (fetch + collate, noised minus clean): {cost * 1e3:.3f} ms")
    median, fast = statistics.median(times["none"]), float(np.percentile(times["none"], 5))
    for what, t in (("median clean step", median), ("fastest clean steps (5th percentile)", fast)):
        print(
            f"    = {cost / t:.3%} of the {what}, {t * 1e3:.1f} ms: implied ratio {t / (t + cost):.4f}"
        )
    return statistics.median(pairs)


def run_cli(args, data_bin):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    wps, pair_ratios = {"kn": [], "none": []}, []
    print(
        f"cli: {args.pairs} pair(s) kn+none side by side; --max-update {args.max_update} "
        f"--log-interval {args.log_interval}, first interval skipped; OMP_NUM_THREADS=1",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-train-") as workdir:
        for _ in range(args.pairs):
            start, procs, medians = time.perf_counter(), {}, {}
            try:
                for condition in ("kn", "none"):
                    cmd = [_common.cli("fairseq-train")]
                    cmd += train_args(data_bin, condition, args, args.max_update, args.log_interval)
                    out = tempfile.TemporaryFile(mode="w+", dir=workdir)
                    procs[condition] = (_common.start(cmd, env=env, cwd=workdir, stdout=out), out)
                for condition, (proc, out) in procs.items():
                    proc.wait()
                    out.seek(0)
                    output = out.read()
                    if proc.returncode != 0:
                        sys.exit(
                            f"error: fairseq-train ({condition}) exited {proc.returncode}:\n{output[-3000:]}"
                        )
                    logs = [
                        json.loads(m[1]) for m in map(WPS_LINE.search, output.splitlines()) if m
                    ]
                    run = [float(entry["wps"]) for entry in logs][1:]  # the first is warm-up
                    if not run:
                        sys.exit("error: no train_inner line after the first; raise --max-update")
                    wps[condition] += run
                    medians[condition] = statistics.median(run)
                    print(
                        f"  {condition:>4}: wps per interval {', '.join(f'{w:.0f}' for w in run)}"
                        f"  (run ended after {time.perf_counter() - start:.0f} s)",
                        flush=True,
                    )
            finally:
                _common.stop([proc for proc, _ in procs.values()])
                for _, out in procs.values():
                    out.close()
            pair_ratios.append(medians["kn"] / medians["none"])
    ratio = statistics.median(wps["kn"]) / statistics.median(wps["none"])
    print(f"  ratio kn / none (medians of all intervals): {ratio:.4f}")
    print(f"  ratio per pair of runs: {', '.join(f'{r:.4f}' for r in pair_ratios)}")
    return ratio


def run_models(args, data_bin):
    import torch

    device = torch.device(args.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else lambda: None
    tokens, dictionary, _ = _common.ptb_train_stream(data_bin)
    ids = torch.from_numpy(tokens).long()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name} ({torch.get_num_threads()} threads); torch {torch.__version__}")
    warmup = 3 if args.warmup is None else args.warmup
    print(
        f"network: hidden {args.hidden_size}, layers 2, dropout {args.dropout}, batch "
        f"{BATCH}x{BPTT}, {args.rounds} round(s) of {args.steps} steps (+{warmup} warmup)"
    )

    def step_of(kind, hidden):
        torch.manual_seed(1)
        model = build_network(kind, dictionary, hidden, args, device).train()
        return training_step(kind, model, ids, args, device)

    steps = {kind: step_of(kind, args.hidden_size) for kind in ("noising", "stock", "plain")}
    times = alternate(steps, args.rounds, args.steps, warmup, sync)
    speed = {kind: args.steps * BATCH * BPTT / min(times[kind]) for kind in steps}
    for kind, step in steps.items():
        each = ", ".join(f"{args.steps * BATCH * BPTT / t:.1f}" for t in times[kind])
        print(
            f"  {kind:8s} {speed[kind]:12.1f} words/s (best of rounds: {each}; last loss {float(step.loss):.3f})"
        )
    for other in ("stock", "plain"):
        print(f"  ratio noising/{other}: {speed['noising'] / speed[other]:.2f}x")
    del steps
    sizes = [int(s) for s in args.memory_sizes.split(",") if s]
    if sizes and device.type != "cuda":
        print("memory: measured on GPU only (torch.cuda.max_memory_allocated)")
    elif sizes:
        print("peak memory of one training step (torch.cuda.max_memory_allocated):")
    for hidden in sizes if device.type == "cuda" else []:
        for kind in args.memory_models.split(","):
            torch.cuda.empty_cache()
            step = step_of(kind, hidden)
            step()  # gradients and the carried state allocated once
            sync()
            torch.cuda.reset_peak_memory_stats(device)
            resident = torch.cuda.memory_allocated(device)
            step()
            sync()
            peak = torch.cuda.max_memory_allocated(device)
            print(
                f"  {kind:8s} hidden {hidden:5d}: peak {peak / 2**20:9.1f} MiB, "
                f"step above resident {(peak - resident) / 2**20:9.1f} MiB"
            )
            del step


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench_training", description=__doc__.split("\n")[0])
    _common.add_ptb_argument(parser)
    parser.add_argument("--mode", choices=("inprocess", "cli", "both", "models"), default="both")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda if available")
    parser.add_argument("--warmup", type=int, help="untimed steps each (5; models: 3)")
    g = parser.add_argument_group("kn / none (inprocess, cli)")
    g.add_argument("--arch", default="noising_lstm_lm_small")
    g.add_argument("--blocks", type=int, default=100, help="in-process updates per condition")
    g.add_argument("--pairs", type=int, default=2, help="cli: (kn, none) pairs of runs")
    g.add_argument("--max-update", type=int, default=120, help="cli: updates per run")
    g.add_argument("--log-interval", type=int, default=20, help="cli")
    g = parser.add_argument_group("models")
    g.add_argument("--steps", type=int, default=20, help="timed steps per round and model")
    g.add_argument("--rounds", type=int, default=1, help="alternating rounds; the best is shown")
    g.add_argument("--hidden-size", type=int, default=512)
    g.add_argument("--dropout", type=float, default=0.5)
    g.add_argument("--clip-norm", type=float, default=0.0, help="0: no clipping")
    g.add_argument("--memory-sizes", default="512,1500", help="CUDA: hidden sizes ('' skips)")
    g.add_argument("--memory-models", default="noising", help="CUDA: models whose memory")
    args = parser.parse_args(argv)
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    data_bin = _common.binarized_ptb(args.ptb_dir, args.cache_dir)
    print(f"# {_common.machine_line()}\n# data {data_bin}; {args.device}; --mode {args.mode}")
    if args.mode == "models":
        return run_models(args, data_bin)
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
