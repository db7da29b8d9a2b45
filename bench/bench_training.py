"""Training words/s on PTB batches of 20 x 35 (bench/README.md, sections 3 and 5).

``--mode inprocess|cli|both``: kn noising (gamma 0.2) against none, same model and flags, in one
Trainer alternating update by update, and as fairseq-train runs side by side. ``--mode models``:
the paper's LSTM against fairseq's ``lstm_lm`` and plain PyTorch; then, on CUDA, peak memory.
"""

import json
import os
import re
import statistics
import sys
import tempfile
import time

from . import _common
from ._common import BATCH, BPTT, alternate
from ._lstm_models import build_network, training_step

WPS_LINE = re.compile(r"\| train_inner \| (\{.*\})\s*$")


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


def run_inprocess(args, data_bin):
    import numpy as np
    import torch

    warmup = 5 if args.warmup is None else args.warmup
    print(
        f"in-process: {args.blocks} updates per condition, alternating (after {warmup} warm-up "
        f"updates each); torch threads {torch.get_num_threads()}",
        flush=True,
    )
    argv = train_args(data_bin, "kn", args)
    times, _, cost, _ = _common.paired_updates(argv, args.blocks, warmup, BATCH, 400, repeats=5)
    kn, none = times["wrapped"], times["clean"]
    pairs = [b / a for a, b in zip(kn, none)]
    boot = np.median(np.random.default_rng(0).choice(pairs, size=(2000, len(pairs))), axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    for label, runs in (("with kn", kn), ("without", none)):
        wps = [BATCH * BPTT / t for t in runs]
        q = statistics.quantiles(wps, n=4)
        print(
            f"  words/s {label:10}: median {statistics.median(wps):.4g} (IQR {q[0]:.4g}-"
            f"{q[2]:.4g}, n={len(wps)})"
        )
    q = statistics.quantiles(pairs, n=4)
    print(
        f"  ratio kn / none, median of adjacent pairs : {statistics.median(pairs):.4f} (bootstrap "
        f"95% CI {low:.4f}-{high:.4f}; pair IQR {q[0]:.3f}-{q[2]:.3f})"
    )
    median, fast = statistics.median(none), float(np.percentile(none, 5))
    for what, ratio in (("median", median / statistics.median(kn)), ("mean", sum(none) / sum(kn))):
        print(f"  ratio kn / none, {what + ' step times':24} : {ratio:.4f}")
    print(f"  noising cost per batch (fetch + collate, noised minus clean): {cost * 1e3:.3f} ms")
    for what, t in (("median clean step", median), ("fastest clean steps (5th percentile)", fast)):
        implied = f"implied ratio {t / (t + cost):.4f}"
        print(f"    = {cost / t:.3%} of the {what}, {t * 1e3:.1f} ms: {implied}")
    return statistics.median(pairs)


def interval_wps(condition, proc, out, started):
    """The wps of a finished fairseq-train run's train_inner lines but the first (warm-up)."""
    proc.wait()
    out.seek(0)
    output = out.read()
    if proc.returncode != 0:
        sys.exit(f"error: fairseq-train ({condition}) exited {proc.returncode}:\n{output[-3000:]}")
    run = [float(json.loads(m[1])["wps"]) for m in map(WPS_LINE.search, output.splitlines()) if m]
    if len(run) < 2:
        sys.exit("error: no train_inner line after the first; raise --max-update")
    print(
        f"  {condition:>4}: wps per interval {', '.join(f'{w:.0f}' for w in run[1:])}"
        f"  (run ended after {time.perf_counter() - started:.0f} s)",
        flush=True,
    )
    return run[1:]


def run_cli(args, data_bin):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    interval = max(1, args.max_update // 6)
    wps, pair_ratios = {"kn": [], "none": []}, []
    print(
        f"cli: {args.pairs} pair(s) kn+none side by side; --max-update {args.max_update} "
        f"--log-interval {interval}, first interval skipped; OMP_NUM_THREADS=1",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-train-") as workdir:
        for _ in range(args.pairs):
            started, procs, medians = time.perf_counter(), {}, {}
            try:
                for condition in wps:
                    cmd = [_common.cli("fairseq-train")]
                    cmd += train_args(data_bin, condition, args, args.max_update, interval)
                    out = tempfile.TemporaryFile(mode="w+", dir=workdir)
                    procs[condition] = (_common.start(cmd, env=env, cwd=workdir, stdout=out), out)
                for condition, (proc, out) in procs.items():
                    run = interval_wps(condition, proc, out, started)
                    wps[condition] += run
                    medians[condition] = statistics.median(run)
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
            f"  {kind:8s} {speed[kind]:12.1f} words/s (best of rounds: {each}; last loss "
            f"{float(step.loss):.3f})"
        )
    for other in ("stock", "plain"):
        print(f"  ratio noising/{other}: {speed['noising'] / speed[other]:.2f}x")
    del steps
    sizes = [int(s) for s in args.memory_sizes.split(",") if s] if device.type == "cuda" else []
    if sizes:
        print("peak memory of one training step (torch.cuda.max_memory_allocated):")
    for hidden in sizes:
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
    parser = _common.parser("bench_training", __doc__)
    parser.add_argument("--mode", choices=("inprocess", "cli", "both", "models"), default="both")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda if available")
    parser.add_argument("--warmup", type=int, help="untimed steps each (5; models: 3)")
    g = parser.add_argument_group("kn / none (inprocess, cli)")
    g.add_argument("--arch", default="noising_lstm_lm_small")
    g.add_argument("--blocks", type=int, default=100, help="in-process updates per condition")
    g.add_argument("--pairs", type=int, default=2, help="cli: (kn, none) pairs of runs")
    g.add_argument("--max-update", type=int, default=120, help="cli: updates a run, logged 6 times")
    g = parser.add_argument_group("models")
    g.add_argument("--steps", type=int, default=20, help="timed steps per round and model")
    g.add_argument("--rounds", type=int, default=1, help="alternating rounds; the best is shown")
    g.add_argument("--hidden-size", type=int, default=512)
    g.add_argument("--dropout", type=float, default=0.5)
    g.add_argument("--clip-norm", type=float, default=0.0, help="0: no clipping")
    g.add_argument("--memory-sizes", default="512,1500", help="CUDA: hidden sizes ('' skips)")
    g.add_argument("--memory-models", default="noising", help="CUDA: models whose memory")
    args = parser.parse_args(argv)
    args.device = _common.device(args.device, parser.prog)
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
