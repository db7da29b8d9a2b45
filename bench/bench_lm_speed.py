#!/usr/bin/env python
"""Training speed of the paper's LSTM language model against fairseq's stock ``lstm_lm``.

Three implementations of the same network (embedding = hidden size, ``--num-layers`` LSTM layers,
dropout, untied softmax layer over the PTB vocabulary) are trained on 20 x 35 batches of Penn
Treebank token ids, each for ``--steps`` timed steps of forward + cross-entropy + backward + SGD
step, after ``--warmup`` untimed steps:

* ``noising``: ``--arch noising_lstm_lm_medium`` of this plugin (fused nn.LSTM, cuDNN on GPU),
  built through fairseq's model registry, with the (h, c) state carried between batches;
* ``stock``:   fairseq's ``lstm_lm`` with the same sizes (LSTMCell loop over time steps in
  Python; it cannot carry state, every batch starts from zeros);
* ``plain``:   nn.Embedding + nn.LSTM + nn.Linear in a plain PyTorch loop (state carried).

It prints words/s of each and the ratios, then, on CUDA, the peak memory of one training step of
the medium (512) and large (1500) sizes (``torch.cuda.max_memory_allocated``), taken over the
second step (gradients already allocated), reported both as the total and above what was
allocated before the step. The data is the PTB training stream (``_common``: binarized once by
``recipes/prepare_ptb.py``).

Example::

    python bench/bench_lm_speed.py --steps 20            # cuda if available, else cpu
    python bench/bench_lm_speed.py --device cpu --steps 5
"""

import argparse
import os
import sys
import time
from argparse import Namespace

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402


# ------------------------------------------------------------------------------------ data
def batches(ids: torch.Tensor, bsz: int, bptt: int, device):
    """Zaremba-style streams: ``bsz`` contiguous rows, consecutive ``bptt`` windows."""
    n = (ids.numel() - 1) // bsz
    data = ids[: n * bsz].view(bsz, n)
    target = ids[1 : n * bsz + 1].view(bsz, n)
    starts = list(range(0, n - bptt + 1, bptt))
    i = 0
    while True:
        s = starts[i % len(starts)]
        yield data[:, s : s + bptt].to(device), target[:, s : s + bptt].to(device)
        i += 1


# ------------------------------------------------------------------------------------ models
class DummyTask:
    def __init__(self, dictionary):
        self.source_dictionary = self.target_dictionary = self.dictionary = dictionary


class PlainLSTMLM(nn.Module):
    def __init__(self, vocab, hidden, layers, dropout, init_range=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(hidden, hidden, layers, dropout=dropout if layers > 1 else 0.0)
        self.out = nn.Linear(hidden, vocab)
        for p in self.parameters():
            nn.init.uniform_(p, -init_range, init_range)

    def forward(self, tokens, state=None):
        x = self.drop(self.embed(tokens.t()))
        x, state = self.lstm(x, state)
        return self.out(self.drop(x).transpose(0, 1)), state


def build(kind, dictionary, hidden, layers, dropout, device):
    from fairseq.models import build_model

    import fairseq_noising  # noqa: F401  (registers the plugin's models)

    if kind == "noising":
        args = Namespace(
            arch="noising_lstm_lm_medium", hidden_size=hidden, num_layers=layers, dropout=dropout
        )
        model = build_model(args, DummyTask(dictionary))
    elif kind == "stock":
        args = Namespace(
            arch="lstm_lm",
            decoder_embed_dim=hidden,
            decoder_hidden_size=hidden,
            decoder_out_embed_dim=hidden,
            decoder_layers=layers,
            dropout=dropout,
            criterion="cross_entropy",
            tokens_per_sample=35,
            max_target_positions=None,
        )
        model = build_model(args, DummyTask(dictionary))
    elif kind == "plain":
        model = PlainLSTMLM(len(dictionary), hidden, layers, dropout)
    else:
        raise ValueError(kind)
    return model.to(device).train()


def make_step(kind, model, optimizer, clip_norm):
    state = {"hc": None}

    def step(x, y):
        if kind == "noising":
            logits, extra = model(x, initial_state=state["hc"])
            h, c = extra["final_state"]
            state["hc"] = (h.detach(), c.detach())
        elif kind == "stock":
            logits, _ = model(x)
        else:
            logits, (h, c) = model(x, state["hc"])
            state["hc"] = (h.detach(), c.detach())
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        optimizer.step()
        return loss.detach()

    return step


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Runner:
    """One model, its optimizer and its batch stream; ``run(n)`` times n training steps."""

    def __init__(self, kind, dictionary, ids, opts, device):
        torch.manual_seed(opts.seed)
        self.device = device
        self.words = opts.batch_size * opts.bptt
        self.model = build(
            kind, dictionary, opts.hidden_size, opts.num_layers, opts.dropout, device
        )
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=opts.lr)
        self.step = make_step(kind, self.model, self.optimizer, opts.clip_norm)
        self.batches = batches(ids, opts.batch_size, opts.bptt, device)
        self.loss = float("nan")

    def run(self, n):
        if n <= 0:
            return 0.0
        sync(self.device)
        start = time.perf_counter()
        for _ in range(n):
            loss = self.step(*next(self.batches))
        sync(self.device)
        elapsed = time.perf_counter() - start
        self.loss = loss.item()
        return n * self.words / elapsed


# ------------------------------------------------------------------------------------ memory
def cuda_step_memory(kind, dictionary, ids, opts, hidden, device):
    torch.cuda.empty_cache()
    torch.manual_seed(opts.seed)
    model = build(kind, dictionary, hidden, opts.num_layers, opts.dropout, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=opts.lr)
    step = make_step(kind, model, optimizer, opts.clip_norm)
    it = batches(ids, opts.batch_size, opts.bptt, device)
    step(*next(it))  # allocate gradients and the carried state once
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    step(*next(it))
    sync(device)
    peak = torch.cuda.max_memory_allocated(device)
    del model, optimizer, step
    return peak, peak - base


# ------------------------------------------------------------------------------------ main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="timed rounds of --steps steps, alternating between the models; "
        "the best round is reported",
    )
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--clip-norm", type=float, default=0.0, help="0: no clipping")
    parser.add_argument(
        "--models",
        default="noising,stock,plain",
        help="comma-separated subset of noising,stock,plain",
    )
    parser.add_argument(
        "--memory-sizes",
        default="512,1500",
        help="hidden sizes whose one-step peak memory is reported ('' to skip)",
    )
    parser.add_argument(
        "--memory-models",
        default="noising",
        help="models whose memory is reported (comma-separated)",
    )
    parser.add_argument("--device", default=None, help="default: cuda if available else cpu")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch default)")
    _common.add_ptb_argument(parser)
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args(argv)

    device = torch.device(opts.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if opts.threads:
        torch.set_num_threads(opts.threads)
    data_bin = _common.binarized_ptb(opts.ptb_dir, opts.cache_dir)
    tokens, dictionary, _ = _common.ptb_train_stream(data_bin)
    ids = torch.from_numpy(tokens).long()
    kinds = [k for k in opts.models.split(",") if k]

    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else (f"cpu ({torch.get_num_threads()} threads)")
    )
    print(f"device: {name}; torch {torch.__version__}")
    print(f"data: {data_bin} ({ids.numel()} tokens, vocabulary {len(dictionary)})")
    print(
        f"network: hidden {opts.hidden_size}, layers {opts.num_layers}, dropout {opts.dropout}, "
        f"batch {opts.batch_size}x{opts.bptt}, {opts.rounds} round(s) of {opts.steps} steps "
        f"(+{opts.warmup} warmup)"
    )

    runners = {kind: Runner(kind, dictionary, ids, opts, device) for kind in kinds}
    for runner in runners.values():
        runner.run(opts.warmup)
    # rounds alternate between the models so that a slow spell of a shared machine hits all
    rounds = {kind: [] for kind in kinds}
    for _ in range(opts.rounds):
        for kind, runner in runners.items():
            rounds[kind].append(runner.run(opts.steps))
    speed = {}
    for kind in kinds:
        speed[kind] = max(rounds[kind])
        per_round = ", ".join(f"{w:.1f}" for w in rounds[kind])
        print(
            f"  {kind:8s} {speed[kind]:12.1f} words/s (best of rounds: {per_round}; "
            f"last loss {runners[kind].loss:.3f})"
        )
    del runners
    if "noising" in speed:
        for other in ("stock", "plain"):
            if other in speed:
                print(f"  ratio noising/{other}: {speed['noising'] / speed[other]:.2f}x")

    sizes = [int(s) for s in opts.memory_sizes.split(",") if s]
    mem_kinds = [k for k in opts.memory_models.split(",") if k]
    if sizes:
        if device.type == "cuda":
            print("peak memory of one training step (torch.cuda.max_memory_allocated):")
            for hidden in sizes:
                for kind in mem_kinds:
                    peak, delta = cuda_step_memory(kind, dictionary, ids, opts, hidden, device)
                    print(
                        f"  {kind:8s} hidden {hidden:5d}: peak {peak / 2**20:9.1f} MiB, "
                        f"step above resident {delta / 2**20:9.1f} MiB"
                    )
        else:
            print("memory: measured on GPU only (torch.cuda.max_memory_allocated)")


if __name__ == "__main__":
    main()
