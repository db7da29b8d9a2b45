"""``--lr-scheduler paper_halving``: the paper's halving protocol (docs/paper_halving.md), its
configuration and its decisions, epoch by epoch.

Fast tier: the scheduler built as fairseq-train builds it (tests/halving_kit.py) is driven
directly with forced sequences of validation losses; the learning rates it gives and the
parameters it restores are compared with the protocol's rules worked by hand. Slow tier
(``-m slow``): the command-line parser (flags, fairseq's defaults, the PTB command in
docs/paper_halving.md). Resuming: tests/test_paper_halving_resume.py; the real fairseq-train:
tests/test_paper_halving_train.py.
"""

import logging
import math
import re
import shlex
from argparse import Namespace
from types import SimpleNamespace

import pytest
import torch
from conftest import PLUGIN_DIR, REPO, lm_train_argv
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim import build_optimizer
from fairseq.optim.fp16_optimizer import FP16Optimizer
from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY, build_lr_scheduler
from halving_kit import (
    SGD_ARGS,
    Tiny,
    build,
    no_fairseq_best,  # noqa: F401  (autouse: no fairseq best leaks between tests)
    params,
    same,
    scheduler_cfg,
    train_a_bit,
)
from omegaconf import OmegaConf

from fairseq_noising.errors import NoisingError
from fairseq_noising.optim.paper_halving import PaperHalvingLRSchedule

DOC = REPO / "docs" / "paper_halving.md"


def parse(*argv):
    """The config of ``fairseq-train ... --optimizer sgd --lr 1.0 --clip-norm 5 --lr-scheduler
    paper_halving ARGV``."""
    argv = lm_train_argv(
        "unused-data", "--lr-scheduler", "paper_halving", *argv, task="language_modeling", lr=1.0
    )
    args = options.parse_args_and_arch(
        options.get_training_parser(), input_args=[str(a) for a in argv]
    )
    return convert_namespace_to_omegaconf(args)


def run_protocol(scheduler, model, losses, stop_min_lr=0.0):
    """fairseq_cli.train's loop: returns [(epoch, lr used in it)] for the epochs it trains."""
    trained, lr = [], scheduler.optimizer.get_lr()
    for epoch, loss in enumerate(losses, 1):
        if lr <= stop_min_lr:
            break
        scheduler.step_begin_epoch(epoch)
        trained.append((epoch, scheduler.optimizer.get_lr()))
        train_a_bit(scheduler, model, epoch)
        lr = scheduler.step(epoch, loss)
    return trained


# ---------------------------------------------------------------------------- configuration
@pytest.mark.slow
def test_registered_with_documented_flags():
    assert LR_SCHEDULER_REGISTRY["paper_halving"] is PaperHalvingLRSchedule
    cfg = parse("--stop-min-lr", "0").lr_scheduler
    assert (cfg.halvings, cfg.halving_threshold, cfg.lr_shrink, cfg.no_restore_best) == (
        8,
        None,
        0.5,
        False,
    )
    assert cfg.halving_start_epoch == 1  # the paper: the rule decides from the first epoch
    cfg = parse(
        "--stop-min-lr",
        "0",
        "--halvings",
        "3",
        "--halving-threshold",
        "0.01",
        "--lr-shrink",
        "0.7",
        "--no-restore-best",
        "--halving-start-epoch",
        "6",
    ).lr_scheduler
    assert (cfg.halvings, cfg.halving_threshold, cfg.lr_shrink, cfg.no_restore_best) == (
        3,
        0.01,
        0.7,
        True,
    )
    assert cfg.halving_start_epoch == 6


@pytest.mark.slow
def test_unit_tests_use_the_config_that_fairseq_train_parses():
    parsed = parse("--stop-min-lr", "0")
    assert OmegaConf.to_container(parsed.lr_scheduler, resolve=True) == OmegaConf.to_container(
        scheduler_cfg(), resolve=True
    )
    assert {k: getattr(parsed.optimizer, k) for k in SGD_ARGS} == SGD_ARGS


@pytest.mark.slow
def test_refuses_default_stop_min_lr_naming_the_flag():
    cfg = parse()  # fairseq's default --stop-min-lr is -1
    with pytest.raises(NoisingError, match=r"pass --stop-min-lr 0.*got --stop-min-lr -1"):
        build(cfg=cfg)


def test_refuses_a_stop_min_lr_that_stops_before_the_last_halved_rate():
    with pytest.raises(
        NoisingError, match="--stop-min-lr 0.01 would stop training before the last"
    ):
        build(stop_min_lr=0.01)  # 1.0 / 2**8 = 0.0039 is the last learning rate trained with
    build(stop_min_lr=0.001)


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(stop_min_lr=-1.0), "pass --stop-min-lr 0"),
        (dict(lr=[1.0, 0.5]), "give a single --lr (got [1.0, 0.5])"),
        (dict(maximize_best_checkpoint_metric=True), "maximize-best-checkpoint-metric"),
        (dict(disable_validation=True), "disable-validation"),
        (dict(halvings=0), "--halvings must be >= 1 (got 0)"),
        (dict(halving_start_epoch=0), "--halving-start-epoch must be >= 1 (got 0)"),
        (
            dict(halving_start_epoch=11, max_epoch=10),
            "--halving-start-epoch 11 comes after --max-epoch 10: the rule would never decide",
        ),
        (dict(lr_shrink=1.0), "--lr-shrink must be in (0, 1) (got 1.0)"),
        (dict(halving_threshold=1.5), "--halving-threshold must be in (0, 1) (got 1.5)"),
        (dict(halving_threshold=0.01, sentence_avg=True), "best-checkpoint-metric nll_loss"),
        (dict(halving_threshold=0.01, best_checkpoint_metric="bleu"), "perplexities"),
    ],
)
def test_refuses_inconsistent_configurations(overrides, match):
    with pytest.raises(NoisingError, match=re.escape(match)) as refused:
        build(**overrides)
    assert str(refused.value).startswith("fairseq-noising: error: --lr-scheduler paper_halving: ")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("metric, value", [("nll_loss", math.log2), ("ppl", float)])
def test_threshold_rule_accepts_per_token_metrics_with_sentence_avg(metric, value):
    """With --sentence-avg the per-token metrics (nll_loss in bits, ppl) feed the 1% rule, which
    reads them as perplexities: 100 -> 98 (2%) keeps the rate, 98 -> 97.5 (0.51%) halves it."""
    scheduler, _ = build(halving_threshold=0.01, sentence_avg=True, best_checkpoint_metric=metric)
    assert scheduler.step(1, value(100.0)) == 1.0
    assert scheduler.step(2, value(98.0)) == 1.0
    assert scheduler.step(3, value(97.5)) == 0.5 and scheduler.halving_started


@pytest.mark.slow
def test_paper_ptb_command_line_from_the_docs_parses_and_builds():
    doc = DOC.read_text(encoding="utf-8")
    block = doc[doc.index("fairseq-train data-bin/ptb") :].split("```")[0]
    argv = shlex.split(block.replace("\\\n", " "))[1:]
    argv[argv.index("--user-dir") + 1] = str(PLUGIN_DIR)
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    cfg = convert_namespace_to_omegaconf(args)
    assert (args.task, args.arch) == ("noised_language_modeling", "noising_lstm_lm_medium")
    assert cfg.optimization.sentence_avg and cfg.optimization.lr == [1.0]
    assert cfg.optimization.clip_norm == 5 and cfg.optimization.stop_min_lr == 0
    assert (cfg.dataset.batch_size, cfg.dataset.required_batch_size_multiple) == (20, 1)
    assert cfg.task.tokens_per_sample == 35 and cfg.lr_scheduler.halvings == 8
    assert cfg.task.noise_scheme == "kn"
    scheduler = build_lr_scheduler(
        cfg.lr_scheduler, build_optimizer(cfg.optimizer, list(Tiny().parameters()))
    )
    assert scheduler.optimizer.get_lr() == 1.0


# ---------------------------------------------------------------------------- plateau rule
def test_no_halving_while_the_validation_loss_improves():
    scheduler, model = build()
    trained = run_protocol(scheduler, model, [6.0, 5.5, 5.0, 4.9, 4.8999])
    assert [lr for _, lr in trained] == [1.0] * 5
    assert scheduler.optimizer.get_lr() == 1.0 and scheduler.halvings == 0
    assert scheduler.best == 4.8999 and scheduler.best_epoch == 5
    assert same(scheduler.best_params, params(model))  # the snapshot is the latest epoch


def test_halving_restores_the_best_epoch_parameters_exactly():
    scheduler, model = build()
    objects = list(model.parameters())
    train_a_bit(scheduler, model, 1)
    assert scheduler.step(1, 5.0) == 1.0
    best = params(model)

    train_a_bit(scheduler, model, 2)  # epoch 2 moves the parameters and gets worse
    assert not same(params(model), best)
    assert scheduler.step(2, 5.2) == 0.5
    assert same(params(model), best)  # bit-exact values of epoch 1
    assert all(a is b for a, b in zip(model.parameters(), objects))  # restored in place
    assert scheduler.best_params[0].device.type == "cpu"

    train_a_bit(scheduler, model, 3)  # improves: kept, lr unchanged
    assert scheduler.step(3, 4.0) == 0.5
    best3 = params(model)
    train_a_bit(scheduler, model, 4)  # equal to the best is not an improvement: the lr halves,
    tied = params(model)  # but fairseq's checkpoint_best.pt takes a tie (<=), so the model keeps
    assert not same(tied, best3)  # epoch 4's parameters, now the best epoch's
    assert scheduler.step(4, 4.0) == 0.25
    assert same(params(model), tied) and scheduler.best_epoch == 4
    assert scheduler.optimizer.get_lr() == 0.25

    train_a_bit(scheduler, model, 5)  # worse: back to epoch 4 (the tie), not epoch 3
    assert scheduler.step(5, 4.5) == 0.125
    assert same(params(model), tied)


def test_no_restore_best_keeps_the_current_parameters():
    scheduler, model = build(no_restore_best=True)
    train_a_bit(scheduler, model, 1)
    scheduler.step(1, 5.0)
    train_a_bit(scheduler, model, 2)
    now = params(model)
    assert scheduler.step(2, 6.0) == 0.5
    assert same(params(model), now) and scheduler.best_params is None


def test_momentum_state_is_cleared_on_restore():
    scheduler, model = build(momentum=0.9)
    train_a_bit(scheduler, model, 1)
    scheduler.step(1, 5.0)
    train_a_bit(scheduler, model, 2)
    assert len(scheduler.optimizer.optimizer.state) > 0
    scheduler.step(2, 6.0)
    assert len(scheduler.optimizer.optimizer.state) == 0


def test_fp16_restore_copies_the_fp32_master_copy_into_the_fp16_model():
    """With --fp16 the optimizer's parameters are an fp32 copy of the fp16 model's: a restore
    writes the best epoch's values into that copy and then into the model itself."""
    model = Tiny().half()
    half = list(model.parameters())
    args = Namespace(**SGD_ARGS)
    # --fp16-no-flatten-grads: one fp32 copy per parameter (the flat copy needs CUDA)
    master = FP16Optimizer.build_fp32_params(args, half, flatten=False)
    common = SimpleNamespace(
        fp16_scale_window=100,
        fp16_init_scale=1,
        fp16_scale_tolerance=0.0,
        threshold_loss_scale=None,
        min_loss_scale=1e-4,
    )
    optimizer = FP16Optimizer(
        SimpleNamespace(optimizer=args, common=common), half, build_optimizer(args, master), master
    )
    scheduler = build_lr_scheduler(scheduler_cfg(), optimizer)

    def train(seed):
        x = torch.randn(8, 3, generator=torch.Generator().manual_seed(seed)).half()
        optimizer.zero_grad()
        optimizer.backward(model(x).float().pow(2).mean())
        optimizer.step()  # updates the fp32 copy, then copies it into the fp16 model

    train(1)
    scheduler.step(1, 5.0)
    best_half, best_master = params(model), [p.detach().clone() for p in master]
    train(2)
    assert not same(params(model), best_half)
    assert scheduler.step(2, 6.0) == 0.5
    assert same([p.detach() for p in master], best_master)
    assert same(params(model), best_half)  # the fp16 model too, not only the master copy


def test_trains_at_lr_over_256_and_stops_at_the_next_non_improvement():
    """The authors' lm.py: ``decay_count > max_decays`` (8) breaks, so the 8th halved rate
    (1/256) is trained and the 9th non-improvement stops training."""
    scheduler, model = build()
    losses = [5.0, 5.5, 4.0, 4.5, 4.5, 3.0] + [9.0] * 20  # improvements do not count
    trained = run_protocol(scheduler, model, losses)
    assert [e for e, _ in trained] == list(range(1, 13))  # 3 improving + 9 non-improving epochs
    assert [lr for _, lr in trained] == [1, 1, 0.5, 0.5, 0.25, 0.125, 0.125] + [
        2.0**-k for k in (4, 5, 6, 7, 8)
    ]
    assert scheduler.halvings == 9 and scheduler.finished
    assert scheduler.optimizer.get_lr() == 0.0  # the stop signal, <= --stop-min-lr 0


def test_halvings_flag_and_shrink_factor():
    scheduler, model = build(halvings=2, lr_shrink=0.1)
    trained = run_protocol(scheduler, model, [5.0, 6.0, 6.0, 6.0, 6.0])
    assert [lr for _, lr in trained] == [1.0, 1.0, pytest.approx(0.1), pytest.approx(0.01)]
    assert scheduler.optimizer.get_lr() == 0.0


def test_nan_validation_loss_counts_as_no_improvement():
    scheduler, model = build()
    scheduler.step(1, 5.0)
    assert scheduler.step(2, float("nan")) == 0.5 and scheduler.best == 5.0


# ---------------------------------------------------------------------------- 1% rule
def bits(ppl):
    return math.log2(ppl)


def test_threshold_rule_halves_once_improvement_falls_below_one_percent():
    scheduler, model = build(halving_threshold=0.01)
    # perplexities 200 -> 150 (25%) -> 148 (1.33%) -> 147 (0.68% < 1%: start) -> 100 -> 101 -> 90
    ppls = [200.0, 150.0, 148.0, 147.0, 100.0, 101.0, 90.0]
    trained = run_protocol(scheduler, model, [bits(p) for p in ppls])
    assert [lr for _, lr in trained] == [1, 1, 1, 1, 0.5, 0.25, 0.125]
    assert scheduler.optimizer.get_lr() == 2.0**-4 and scheduler.halving_started
    assert scheduler.best == bits(90.0)


def test_threshold_rule_uses_perplexity_not_loss_differences():
    # a loss (bits) drop of 0.0145 is a 1.0% perplexity drop (1 - 2**-0.0145 = 0.0100)
    for drop, halves in ((0.0150, False), (0.0140, True)):
        scheduler, model = build(halving_threshold=0.01)
        scheduler.step(1, 7.0)
        assert (scheduler.step(2, 7.0 - drop) == 0.5) is halves, drop
    scheduler, model = build(halving_threshold=0.01, best_checkpoint_metric="ppl")
    scheduler.step(1, 100.0)
    assert scheduler.step(2, 99.5) == 0.5  # 0.5% < 1%


def test_threshold_rule_restores_and_halves_on_a_worse_epoch():
    scheduler, model = build(halving_threshold=0.01)
    train_a_bit(scheduler, model, 1)
    scheduler.step(1, 7.0)
    best = params(model)
    train_a_bit(scheduler, model, 2)
    assert scheduler.step(2, 7.5) == 0.5 and same(params(model), best)


# ---------------------------------------------------------------------------- --halving-start-epoch
def test_before_the_start_epoch_nothing_halves_and_nothing_is_restored(caplog):
    """--halving-start-epoch 4, the plateau rule, by hand: epochs 2 and 3 are worse than epoch 1
    but come before epoch 4 (lr 1, their own parameters); epoch 4 improves on epoch 1; epoch 5 is
    worse: the first halving, back to epoch 4's parameters."""
    scheduler, model = build(halving_start_epoch=4)
    train_a_bit(scheduler, model, 1)
    assert scheduler.step(1, 5.0) == 1.0
    for epoch, loss in ((2, 5.5), (3, 5.2)):
        train_a_bit(scheduler, model, epoch)
        own = params(model)
        with caplog.at_level(logging.INFO):
            assert scheduler.step(epoch, loss) == 1.0
        assert same(params(model), own) and scheduler.halvings == 0
        assert scheduler.best_epoch == 1
    assert caplog.text.count("lr stays 1, parameters kept: the rule decides from epoch 4 on") == 2
    train_a_bit(scheduler, model, 4)
    best = params(model)
    assert scheduler.step(4, 4.8) == 1.0 and scheduler.best_epoch == 4
    train_a_bit(scheduler, model, 5)
    assert scheduler.step(5, 4.9) == 0.5 and same(params(model), best)
    assert scheduler.halvings == 1


def test_threshold_rule_starts_no_earlier_than_the_start_epoch():
    build(halving_start_epoch=10, max_epoch=10)  # the last epoch may be the first decided
    scheduler, model = build(halving_threshold=0.01, halving_start_epoch=5)
    # 200 -> 150 -> 148 -> 147 (0.68% < 1%, but epoch 4 < 5: held) -> 100 (32%) -> 101 (worse:
    # the rule starts, halving 1) -> 90 (halving 2: every epoch from the start on)
    ppls = [200.0, 150.0, 148.0, 147.0, 100.0, 101.0, 90.0]
    trained = run_protocol(scheduler, model, [bits(p) for p in ppls])
    assert [lr for _, lr in trained] == [1, 1, 1, 1, 1, 1, 0.5]
    assert scheduler.optimizer.get_lr() == 0.25 and scheduler.halving_started
    assert scheduler.best == bits(90.0)
