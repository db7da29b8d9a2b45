"""fp32 against bf16 training steps (bench/README.md, section 8): the medium LM (2 x 512, PTB
batches of 20 x 35) and the paper's 2 x 512 translation model (Multi30k, Moses tokens, batches of
128 sentences), each step as fairseq-train runs it (``--precision``: the plugin's task under
fairseq's Trainer) and in a bare PyTorch loop over the same model (forward, cross entropy,
backward, clip 5, SGD) under the same autocast; and fairseq's own ``--bf16`` form in the bare
loop: weights cast to bf16, the update on an fp32 master copy. Conditions alternate (ABBA).
"""

import copy
import os
from pathlib import Path

from . import _common
from ._common import BATCH, BPTT, alternate

CONDITIONS = ("recipe fp32", "recipe bf16", "plain fp32", "plain bf16", "plain bf16 weights")


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


def argv(kind, data_bin, precision):
    """fairseq-train's command line of the recipe's step (the paper's SGD, clip 5)."""
    common = ["--user-dir", _common.PLUGIN_DIR, "--cpu", "--num-workers", 0, "--seed", 1]
    common += ["--optimizer", "sgd", "--lr", 1.0, "--clip-norm", 5, "--sentence-avg"]
    common += ["--no-save", "--disable-validation", "--precision", precision]
    common += ["--required-batch-size-multiple", 1]
    if kind == "lm":
        task = ["--task", "noised_language_modeling", "--arch", "noising_lstm_lm_medium"]
        task += ["--stateful-bptt", "--batch-size", BATCH, "--tokens-per-sample", BPTT]
    else:
        task = ["--task", "noised_translation", "--arch", "noising_lstm_iwslt_en_de"]
        task += ["-s", "en", "-t", "de", "--batch-size", 128]
    return [str(a) for a in [data_bin, *common, *task]]


def recipe_step(kind, data_bin, precision):
    """One update of fairseq's Trainer on the plugin's task (over 64 batches in turn); its model
    and those batches."""
    from fairseq.trainer import Trainer

    cfg, task = _common.fairseq_task(argv(kind, data_bin, precision))
    task.load_dataset("train", epoch=1)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    batches = trainer.get_train_iterator(epoch=1, load_dataset=False).next_epoch_itr()
    first = [next(batches) for _ in range(64)]

    def step():  # the same batches as the bare loop's, in the same order
        trainer.train_step([first[step.count % len(first)]])
        step.count += 1

    step.count = 0
    return step, model, first


def plain_step(model, batches, precision):
    """The same model in a bare loop: forward (under autocast in bf16), loss summed over tokens
    and averaged over the batch's rows, backward, clip 5, SGD at lr 1. ``bf16 weights``: the
    model cast to bf16, gradients copied to an fp32 master copy that takes the update (fairseq's
    FP16Optimizer)."""
    import torch

    model = copy.deepcopy(model).train()
    master = None
    if precision == "bf16 weights":
        master = [p.detach().clone() for p in model.parameters()]
        model = model.bfloat16()
    params = master or list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=1.0)

    def step():
        sample = batches[step.count % len(batches)]
        step.count += 1
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
                m.grad = p.grad.float()
                p.grad = None
        torch.nn.utils.clip_grad_norm_(params, 5.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if master:
            with torch.no_grad():
                for m, p in zip(master, model.parameters()):
                    p.copy_(m)

    step.count = 0
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
    for name in CONDITIONS:
        each = ", ".join(f"{t / args.steps * 1000:.0f}" for t in times[name])
        print(f"  {name:20s} {ms[name]:8.0f}   (rounds: {each})")
    print(
        f"  speed-up bf16 / fp32, recipe: {ms['recipe fp32'] / ms['recipe bf16']:.2f}x   goal >= 1.8"
    )
    print(
        f"  speed-up bf16 / fp32, plain: {ms['plain fp32'] / ms['plain bf16']:.2f}x;"
        f" bf16 weights: {ms['plain fp32'] / ms['plain bf16 weights']:.2f}x"
    )
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
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from fairseq_noising.tasks.precision import bf16_supported

    flags = sorted(
        {
            f
            for line in open("/proc/cpuinfo")
            if line.startswith("flags")
            for f in line.split()[2:]
            if "bf16" in f or "amx" in f
        }
    )
    print(
        f"# {_common.machine_line()}\n# torch {torch.__version__}, {torch.get_num_threads()} "
        f"thread(s); bf16 flags: {' '.join(flags) or 'none'}; oneDNN bf16: "
        f"{bf16_supported('cpu')}"
    )
    for kind in args.models.split(","):
        if kind == "lm":
            data_bin = _common.binarized_ptb(args.ptb_dir, args.cache_dir)
        else:
            data_bin = multi30k_words(
                args.multi30k_dir or args.ptb_dir.parent / "multi30k", args.cache_dir
            )
        bench(kind, data_bin, args)
    print(f"# finished {_common.machine_line()}")


if __name__ == "__main__":
    main()
