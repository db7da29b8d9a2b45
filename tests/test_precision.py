"""``--precision bf16``: training's forward under torch.autocast, fp32 weights and checkpoints.

Fast tier: the criterion the tasks hand fairseq's ``train_step`` runs under autocast exactly when
bf16 is asked (torch's own autocast state, seen from inside the criterion, is the oracle). Slow
tier (real data): the same through both tasks' ``train_step``; the one-line refusals before
training (fairseq's ``--fp16``, ``--amp`` and ``--bf16`` on a CPU, and ``--precision bf16`` where
the CPU's flags, mocked, lack bf16), set up as fairseq-train sets them up; a bf16 run of the real
fairseq-train on the tiny PTB slice trains with other arithmetic than fp32 (its weights differ),
saves fp32 checkpoints, resumes bit-identically to the run that was not interrupted, and
fairseq-eval-lm scores its checkpoint as tests/score_kit.py does in fp32. The bf16 trainings run
on any CPU: where it has no bf16 units, its flags are mocked to have them (``bf16_cpu``) and
PyTorch emulates the arithmetic. The check reads the flags /proc/cpuinfo lists.
"""

import math
from pathlib import Path

import pytest
import torch
from conftest import (
    CLI_ENV,
    COMMON,
    TINY_LM,
    TINY_MT,
    build_task,
    lm_train_argv,
    mt_train_argv,
    run_cli,
    stateful_lm_argv,
)
from halving_kit import del_fairseq_best, train_in_process
from score_kit import printed_perplexity, stateful_perplexity

from fairseq_noising.errors import NoisingError
from fairseq_noising.tasks import precision

SGD = ["--optimizer", "sgd", "--lr", 1.0, "--max-update", 1, "--batch-size", 5]


def set_up(argv):
    """(task, cfg, model) as fairseq-train builds them from ``argv``."""
    task, cfg = build_task(argv)
    return task, cfg, task.build_model(cfg.model)


class Spy:
    """A criterion that records whether autocast was on, and in which dtype, when it ran."""

    def __init__(self):
        self.seen = []

    def __call__(self, model, sample):
        self.seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        loss = sum(p.sum() for p in model.parameters()) * 0.0
        return loss, 1, {}


@pytest.mark.parametrize("asked", ["fp32", "bf16"])
def test_the_criterion_runs_under_autocast_only_in_bf16(asked):
    spy, model = Spy(), torch.nn.Linear(2, 2)
    loss, _, _ = precision.autocast_forward(asked, spy)(model, {})
    expected = (True, torch.bfloat16) if asked == "bf16" else False
    assert [s if s[0] else False for s in spy.seen] == [expected]
    assert not torch.is_autocast_enabled("cpu")  # the region ends with the forward
    loss.backward()
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("asked", ["fp32", "bf16"])
@pytest.mark.parametrize("kind", ["lm", "mt"])
def test_the_tasks_train_step_runs_the_forward_under_autocast_only_in_bf16(
    kind, asked, ptb_tiny_bin, multi30k_small_bin, bf16_cpu
):
    if kind == "lm":
        argv = lm_train_argv(ptb_tiny_bin, *SGD, "--precision", asked, model=TINY_LM)
    else:
        argv = mt_train_argv(multi30k_small_bin, *SGD, "--precision", asked, model=TINY_MT)
    task, cfg, model = set_up(argv)
    assert cfg.task.precision == asked
    spy = Spy()

    class Optimizer:
        def backward(self, loss):
            assert not torch.is_autocast_enabled("cpu")  # the backward outside the region
            loss.backward()

    task.train_step({"net_input": {}}, model, spy, Optimizer(), 0)
    expected = (True, torch.bfloat16) if asked == "bf16" else False
    assert [s if s[0] else False for s in spy.seen] == [expected]
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.slow
def test_the_bf16_criterion_computes_in_bf16_and_returns_an_fp32_loss(ptb_tiny_bin):
    """The real cross entropy of a tiny LM under bf16: the logits are bf16, the loss fp32 and
    close to the fp32 loss of the same batch (within bf16's rounding), not equal to it."""
    argv = lm_train_argv(ptb_tiny_bin, *SGD, model=TINY_LM)
    task, cfg, model = set_up(argv)
    task.load_dataset("train")
    criterion = task.build_criterion(cfg.criterion)
    batch = task.dataset("train").collater([task.dataset("train")[i] for i in range(4)])
    logits = []
    model.decoder.register_forward_hook(lambda m, i, out: logits.append(out[0].dtype))
    fp32, _, _ = precision.autocast_forward("fp32", criterion)(model, batch)
    bf16, _, _ = precision.autocast_forward("bf16", criterion)(model, batch)
    assert logits == [torch.float32, torch.bfloat16]
    assert bf16.dtype == torch.float32
    assert bf16.item() != fp32.item()
    assert bf16.item() == pytest.approx(fp32.item(), rel=2e-2)


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--fp16"], "--fp16 and --amp (common.fp16, common.amp) need a CUDA GPU"),
        (["--amp"], "--fp16 and --amp (common.fp16, common.amp) need a CUDA GPU"),
        (["--bf16"], "--bf16 (common.bf16) casts the weights to bfloat16"),
    ],
    ids=["fp16", "amp", "bf16"],
)
def test_fairseqs_own_precision_flags_stop_in_one_line_on_a_cpu(flags, expected, ptb_tiny_bin):
    argv = lm_train_argv(ptb_tiny_bin, *SGD, *flags, model=TINY_LM)
    with pytest.raises(NoisingError) as refused:
        set_up(argv)
    assert refused.value.message.startswith(expected)
    assert "--precision bf16 (Hydra: task.precision=bf16)" in refused.value.message


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lm", "mt"])
def test_bf16_on_a_cpu_without_bf16_stops_in_one_line(
    kind, ptb_tiny_bin, multi30k_small_bin, monkeypatch
):
    no_bf16 = {f: False for f in precision.BF16_CPU_FLAGS}
    flags = {**torch.cpu.get_capabilities(), **no_bf16}
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: flags)
    if kind == "lm":
        argv = lm_train_argv(ptb_tiny_bin, *SGD, "--precision", "bf16", model=TINY_LM)
    else:
        argv = mt_train_argv(multi30k_small_bin, *SGD, "--precision", "bf16", model=TINY_MT)
    with pytest.raises(NoisingError) as refused:
        set_up(argv)
    assert refused.value.message == (
        "--precision bf16 (task.precision=bf16): this cpu lacks AVX512-BF16 or AMX in its flags "
        "(PyTorch would emulate bf16 in software)"
    )
    # fp32 is never refused, and a checkpoint is loaded for evaluation without the check
    argv[argv.index("bf16")] = "fp32"
    set_up(argv)


@pytest.mark.slow
def test_a_cpu_whose_bf16_is_slower_than_fp32_is_told_so(
    ptb_tiny_bin, monkeypatch, caplog, bf16_cpu
):
    argv = lm_train_argv(ptb_tiny_bin, *SGD, "--precision", "bf16", model=TINY_LM)
    for speedup, warned in ((0.6, True), (1.9, False)):
        monkeypatch.setattr(precision, "cpu_bf16_speedup", lambda s=speedup: s)
        caplog.clear()
        set_up(argv)
        assert ("took 1.7x the fp32 time" in caplog.text) == warned
        assert ("training will be slower than in fp32" in caplog.text) == warned


# ---------------------------------------------------------------------------- slow tier
def bf16_run(data, save, caplog, *extra, prec="bf16"):
    """fairseq-train in-process: the paper's LM (16 units, stateful BPTT over 5 rows) with KN
    noising, the paper's SGD at lr 1 under paper_halving, checkpoints at epoch ends only."""
    flags = ["--precision", prec, "--seed", 1, "--lr-scheduler", "paper_halving"]
    flags += ["--stop-min-lr", 0, "--save-dir", save, "--no-epoch-checkpoints"]
    argv = stateful_lm_argv(data, *flags, *extra, scheme="kn", gamma=0.5, lr=1.0)
    del_fairseq_best()
    return train_in_process(argv, caplog)


def state(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_a_bf16_run_saves_fp32_resumes_bit_identically_and_evaluates(
    ptb_tiny_bin, tmp_path, caplog, bf16_cpu
):
    whole, parts, fp32 = tmp_path / "whole", tmp_path / "parts", tmp_path / "fp32"
    bf16_run(ptb_tiny_bin, whole, caplog, "--max-epoch", 4)
    bf16_run(ptb_tiny_bin, parts, caplog, "--max-epoch", 2)
    log = bf16_run(ptb_tiny_bin, parts, caplog, "--max-epoch", 4)
    assert "begin training epoch 3" in log and "begin training epoch 2" not in log
    bf16_run(ptb_tiny_bin, fp32, caplog, "--max-epoch", 4, prec="fp32")
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        models = {run: state(run / name)["model"] for run in (whole, parts, fp32)}
        assert all(t.dtype == torch.float32 for t in models[whole].values())
        assert state(whole / name)["cfg"]["task"]["precision"] == "bf16"
        assert equal(models[whole], models[parts]), name  # resumed: bit-identical
        assert not equal(models[whole], models[fp32]), name  # bf16 arithmetic, not fp32's

    # fairseq-eval-lm scores the bf16 checkpoint in fp32, as the oracle computes it
    checkpoint = whole / "checkpoint_best.pt"
    printed = run_cli(
        [
            "fairseq-eval-lm",
            ptb_tiny_bin,
            "--path",
            checkpoint,
            *COMMON,
            "--task",
            "noised_language_modeling",
            "--stateful-bptt",
            "--batch-size",
            1,
            "--gen-subset",
            "valid",
        ],
        env=CLI_ENV,
    )
    expected = stateful_perplexity(checkpoint, ptb_tiny_bin, "valid")
    assert math.isclose(printed_perplexity(printed.stdout + printed.stderr), expected, rel_tol=1e-3)


def test_the_cpu_check_reads_the_bf16_flags_proc_cpuinfo_lists():
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo on this system")
    flags = {
        f
        for line in cpuinfo.read_text().splitlines()
        if line.startswith(("flags", "Features"))
        for f in line.split(":", 1)[1].split()
    }
    # the kernel's names: x86's avx512_bf16 and amx_bf16, ARM's bf16 and svebf16
    expected = bool(flags & {"avx512_bf16", "amx_bf16", "bf16", "svebf16"})
    assert precision.bf16_supported("cpu") == expected


def test_the_speed_probe_leaves_the_random_state_as_it_was():
    """The probe runs before the model's initialisation: a bf16 run starts from the weights an
    fp32 run of the same seed starts from."""
    before = torch.get_rng_state()
    assert precision.cpu_bf16_speedup() > 0
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.slow
def test_a_bf16_translation_checkpoint_is_fp32_and_fairseq_generate_translates_every_sentence(
    multi30k_small_bin, tmp_path, bf16_cpu
):
    save = tmp_path / "ckpt"
    train = ["--max-update", 4, "--batch-size", 20, "--required-batch-size-multiple", 1]
    argv = mt_train_argv(
        multi30k_small_bin, *train, "--save-dir", save, "--precision", "bf16", model=TINY_MT
    )
    run_cli(["fairseq-train", *argv, "--optimizer", "adam", "--lr", 0.001], env=bf16_cpu)
    model = state(save / "checkpoint_last.pt")["model"]
    assert all(t.dtype == torch.float32 for t in model.values() if t.is_floating_point())
    out = run_cli(
        ["fairseq-generate", multi30k_small_bin, "--path", save / "checkpoint_last.pt", *COMMON]
        + ["--task", "noised_translation", "-s", "en", "-t", "de", "--gen-subset", "valid"]
        + ["--beam", 2, "--batch-size", 16, "--required-batch-size-multiple", 1],
        env=CLI_ENV,  # the CPU as it is: evaluating a bf16 checkpoint needs no bf16
    )
    hypotheses = [line for line in out.stdout.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 200  # every valid sentence of the slice
