"""Training words/s on PTB batches of 20 x 35 (bench/README.md, sections 3 and 5)."""

import itertools
import json
import os
import re
import statistics
import sys
import tempfile
import time
from argparse import Namespace
from contextlib import ExitStack

from . import _common
from ._common import BATCH, BPTT, alternate, ptb_batches

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
        q, median = statistics.quantiles(wps, n=4), statistics.median(wps)
        iqr = f"IQR {q[0]:.4g}-{q[2]:.4g}, n={len(wps)}"
        print(f"  words/s {label:10}: median {median:.4g} ({iqr})")
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


def run_cli(args, data_bin):
    """kn and none as fairseq-train runs side by side: the wps of their logged intervals."""
    env, interval = {**os.environ, **_common.ONE_THREAD}, max(1, args.max_update // 6)
    wps, pair_ratios = {"kn": [], "none": []}, []
    print(
        f"cli: {args.pairs} pair(s) kn+none side by side; --max-update {args.max_update} "
        f"--log-interval {interval}, first interval skipped; OMP_NUM_THREADS=1",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-train-") as workdir, ExitStack() as stack:
        running = []
        stack.callback(_common.stop, running)  # whatever happens
        for _ in range(args.pairs):
            started, procs, medians = time.perf_counter(), {}, {}
            for condition in wps:  # the pair side by side
                cmd = [_common.cli("fairseq-train")]
                cmd += train_args(data_bin, condition, args, args.max_update, interval)
                out = stack.enter_context(tempfile.TemporaryFile(mode="w+", dir=workdir))
                running.append(_common.start(cmd, env, workdir, out))
                procs[condition] = running[-1], out
            for condition, (proc, out) in procs.items():
                code, _ = proc.wait(), out.seek(0)
                output = out.read()
                if code != 0:
                    sys.exit(f"error: fairseq-train ({condition}) exited {code}:\n{output[-3000:]}")
                found = [m for m in map(WPS_LINE.search, output.splitlines()) if m]
                run = [float(json.loads(m[1])["wps"]) for m in found][1:]  # the first: warm-up
                if not run:
                    sys.exit("error: no train_inner line after the first; raise --max-update")
                each = ", ".join(f"{w:.0f}" for w in run)
                ended = f"(run ended after {time.perf_counter() - started:.0f} s)"
                print(f"  {condition:>4}: wps per interval {each}  {ended}", flush=True)
                wps[condition] += run
                medians[condition] = statistics.median(run)
            pair_ratios.append(medians["kn"] / medians["none"])
    ratio = statistics.median(wps["kn"]) / statistics.median(wps["none"])
    print(f"  ratio kn / none (medians of all intervals): {ratio:.4f}")
    print(f"  ratio per pair of runs: {', '.join(f'{r:.4f}' for r in pair_ratios)}")
    return ratio


def network_step(kind, hidden, dictionary, ids, args, device):
    """A training step of one of the three networks (bench/README.md, section 5)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from fairseq.models import build_model

    import fairseq_noising.fairseq_plugin  # noqa: F401  (registers the plugin's models)

    torch.manual_seed(1)
    task = Namespace(dictionary=dictionary, source_dictionary=dictionary)
    task.target_dictionary, dropout = dictionary, args.dropout
    if kind == "noising":
        cfg = dict(hidden_size=hidden, num_layers=2, dropout=dropout)
        model = build_model(Namespace(arch="noising_lstm_lm_medium", **cfg), task)
    elif kind == "stock":
        cfg = dict(decoder_embed_dim=hidden, decoder_hidden_size=hidden, decoder_layers=2)
        cfg.update(decoder_out_embed_dim=hidden, criterion="cross_entropy", dropout=dropout)
        cfg.update(tokens_per_sample=BPTT, max_target_positions=None)
        model = build_model(Namespace(arch="lstm_lm", **cfg), task)
    else:  # plain: dropout after the embedding and after the LSTM
        model = nn.ModuleDict(dict(embed=nn.Embedding(len(dictionary), hidden)))
        model.update(dict(lstm=nn.LSTM(hidden, hidden, 2, dropout=dropout)))
        model.update(dict(out=nn.Linear(hidden, len(dictionary)), drop=nn.Dropout(dropout)))
        for p in model.parameters():
            nn.init.uniform_(p, -0.1, 0.1)
    model, batches, carried = model.to(device).train(), itertools.cycle(ptb_batches(ids)), [None]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)

    def step():
        x, y = (t.to(device) for t in next(batches))
        if kind == "noising":
            logits, extra = model(x, initial_state=carried[0])
            carried[0] = tuple(s.detach() for s in extra["final_state"])
        elif kind == "stock":
            logits, _ = model(x)
        else:
            h, state = model.lstm(model.drop(model.embed(x.t())), carried[0])
            logits = model.out(model.drop(h).transpose(0, 1))
            carried[0] = tuple(s.detach() for s in state)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
        optimizer.step()
        step.loss = loss.detach()

    return step


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
    kinds, words = ("noising", "stock", "plain"), args.steps * BATCH * BPTT
    steps = {k: network_step(k, args.hidden_size, dictionary, ids, args, device) for k in kinds}
    times = alternate(steps, args.rounds, args.steps, warmup, sync)
    speed = {kind: words / min(times[kind]) for kind in steps}
    for kind, step in steps.items():
        each = ", ".join(f"{words / t:.1f}" for t in times[kind])
        loss = f"last loss {float(step.loss):.3f}"
        print(f"  {kind:8s} {speed[kind]:12.1f} words/s (best of rounds: {each}; {loss})")
    for other in ("stock", "plain"):
        print(f"  ratio noising/{other}: {speed['noising'] / speed[other]:.2f}x")
    del steps
    sizes = [int(s) for s in args.memory_sizes.split(",") if s] if device.type == "cuda" else []
    if sizes:
        print("peak memory of one training step (torch.cuda.max_memory_allocated):")
    for hidden, kind in ((h, k) for h in sizes for k in args.memory_models.split(",")):
        torch.cuda.empty_cache()
        step = network_step(kind, hidden, dictionary, ids, args, device)
        step()  # gradients and the carried state allocated once
        sync()
        torch.cuda.reset_peak_memory_stats(device)
        resident = torch.cuda.memory_allocated(device)
        step()
        sync()
        peak = torch.cuda.max_memory_allocated(device)
        above = f"step above resident {(peak - resident) / 2**20:9.1f} MiB"
        print(f"  {kind:8s} hidden {hidden:5d}: peak {peak / 2**20:9.1f} MiB, {above}")
        del step


def main(argv=None):
    parser = _common.parser("bench_training", __doc__, device=True)
    parser.add_argument("--mode", choices=("inprocess", "cli", "both", "models"), default="both")
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
