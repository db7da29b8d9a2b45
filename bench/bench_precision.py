"""fp32 against bf16 training steps, as fairseq-train runs them and in a bare PyTorch loop."""

import copy
import itertools
import os
from pathlib import Path

from . import _common
from ._common import BATCH, BPTT, alternate


def multi30k_words(multi30k: Path, cache: Path) -> Path:
    """recipes/multi30k.sh's data-bin: Moses tokens, every word of train in the dictionaries."""
    from fairseq_noising.data_prep import ptb
    from fairseq_noising.data_prep.translation import copy_plain, tokenize_dir

    work = cache / "multi30k-moses"
    if not (work / "data-bin" / "dict.de.txt").exists():
        splits = [("train", "train"), ("valid", "val"), ("test", "test")]
        copy_plain(str(multi30k), str(work / "raw"), "en", "de", splits)
        tokenize_dir(str(work / "raw"), str(work / "tok"), "en", "de", "moses")
        flags = ["--source-lang", "en", "--target-lang", "de", "--trainpref", work / "tok/train"]
        flags += ["--validpref", work / "tok/valid", "--nwordssrc", 50000, "--nwordstgt", 50000]
        ptb.preprocess(*flags, "--destdir", work / "data-bin")
    return work / "data-bin"


def recipe_step(kind, data_bin, precision):
    """One update of fairseq's Trainer on the plugin's task (64 batches in turn), model, batches."""
    from fairseq.trainer import Trainer

    argv = "--cpu --num-workers 0 --seed 1 --optimizer sgd --lr 1.0 --clip-norm 5 --sentence-avg "
    argv += f"--no-save --disable-validation --precision {precision} "
    argv += "--required-batch-size-multiple 1 --task " + (
        f"noised_language_modeling --arch noising_lstm_lm_medium --stateful-bptt --batch-size "
        f"{BATCH} --tokens-per-sample {BPTT}"
        if kind == "lm"
        else "noised_translation --arch noising_lstm_iwslt_en_de -s en -t de --batch-size 128"
    )
    argv = [str(data_bin), "--user-dir", str(_common.PLUGIN_DIR), *argv.split()]
    cfg, task = _common.fairseq_task(argv)
    task.load_dataset("train", epoch=1)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    batches = trainer.get_train_iterator(epoch=1, load_dataset=False).next_epoch_itr()
    first = [next(batches) for _ in range(64)]
    cycle = itertools.cycle(first)  # the same batches as the bare loop's, in the same order
    return (lambda: trainer.train_step([next(cycle)])), model, first


def plain_step(model, batches, precision):
    """An update of the same model in a bare loop (bench/README.md, section 8)."""
    import torch

    model, master = copy.deepcopy(model).train(), None
    if precision == "bf16 weights":
        master, model = [p.detach().clone() for p in model.parameters()], model.bfloat16()
    params = master or list(model.parameters())
    optimizer, cycle = torch.optim.SGD(params, lr=1.0), itertools.cycle(batches)

    def step():
        sample = next(cycle)
        net_input = {k: v for k, v in sample["net_input"].items() if k != "initial_state"}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            net_output = model(**net_input)
            lprobs = model.get_normalized_probs(net_output, log_probs=True)
        loss = torch.nn.functional.nll_loss(
            lprobs.view(-1, lprobs.size(-1)).float(), sample["target"].view(-1), reduction="sum"
        ) / sample["target"].size(0)
        loss.backward()
        if master:
            for m, p in zip(master, model.parameters()):
                m.grad, p.grad = p.grad.float(), None
        torch.nn.utils.clip_grad_norm_(params, 5.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if master:
            with torch.no_grad():
                for m, p in zip(master, model.parameters()):
                    p.copy_(m)

    return step


def bench(kind, data_bin, args):
    steps = {}
    for precision in ("fp32", "bf16"):
        steps[f"recipe {precision}"], model, batches = recipe_step(kind, data_bin, precision)
    for precision in ("fp32", "bf16", "bf16 weights"):
        steps[f"plain {precision}"] = plain_step(model, batches, precision)
    times = alternate(steps, args.rounds, args.steps, args.warmup)
    ms = {name: min(t) / args.steps * 1000 for name, t in times.items()}
    print(f"{kind}: ms per update, best of {args.rounds} alternating rounds of {args.steps}")
    for name in steps:  # recipe fp32, bf16, plain fp32, bf16, bf16 weights
        each = ", ".join(f"{t / args.steps * 1000:.0f}" for t in times[name])
        print(f"  {name:20s} {ms[name]:8.0f}   (rounds: {each})")
    speedup = ms["recipe fp32"] / ms["recipe bf16"]
    print(f"  speed-up bf16 / fp32, recipe: {speedup:.2f}x   goal >= 1.8")
    plain, weights = (ms["plain fp32"] / ms[f"plain {p}"] for p in ("bf16", "bf16 weights"))
    print(f"  speed-up bf16 / fp32, plain: {plain:.2f}x; bf16 weights: {weights:.2f}x")
    for p in ("fp32", "bf16"):
        print(f"  recipe / plain, {p}: {ms[f'recipe {p}'] / ms[f'plain {p}']:.3f}   goal <= 1.10")


def main(argv=None):
    import torch

    parser = _common.parser("bench_precision", __doc__)
    parser.add_argument("--multi30k-dir", type=Path, help="default: the --ptb-dir's ../multi30k")
    parser.add_argument("--models", default="lm,mt", help="lm, mt or both (lm,mt)")
    parser.add_argument("--steps", type=int, default=3, help="timed updates per round")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (ABBA)")
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    from fairseq_noising.tasks.precision import bf16_supported  # fairseq: loaded after --help

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    flags = {f for line in open("/proc/cpuinfo") if line.startswith("flags") for f in line.split()}
    flags = sorted(f for f in flags if "bf16" in f or "amx" in f)
    threads, hardware = torch.get_num_threads(), bf16_supported("cpu")
    print(f"# {_common.machine_line()}\n# torch {torch.__version__}, {threads} thread(s); ", end="")
    print(f"bf16 flags: {' '.join(flags) or 'none'}; bf16 in hardware: {hardware}")
    multi30k = args.multi30k_dir or args.ptb_dir.parent / "multi30k"
    for kind in args.models.split(","):
        if kind == "lm":
            bench(kind, _common.binarized_ptb(args.ptb_dir, args.cache_dir), args)
        else:
            bench(kind, multi30k_words(multi30k, args.cache_dir), args)
    print(f"# finished {_common.machine_line()}")


if __name__ == "__main__":
    main()
