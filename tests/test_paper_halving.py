"""``--lr-scheduler paper_halving``: the paper's halving protocol (docs/paper_halving.md).

Fast tier: unit tests drive the scheduler directly, built as fairseq-train builds it
(``build_lr_scheduler``, ``build_optimizer``) from the config that ``fairseq-train ...
--lr-scheduler paper_halving --stop-min-lr 0`` parses to, on a tiny model wrapped in fairseq's
SGD, with forced sequences of validation losses. The config is made from the dataclass, because
hydra's parser takes most of a second per command line; a slow test checks it against the parser.

Slow tier (``-m slow``): the command-line parser (flags, fairseq's defaults, the PTB command in
docs/paper_halving.md), and the real ``fairseq-train`` on 300 lines of PTB (60 of validation):
once as the console script to completion, once in-process stopped by ``--max-epoch``, resumed,
and re-launched, and in-process with planted validation losses.
"""

import copy
import io
import logging
import math
import os
import re
import shlex
from argparse import Namespace
from types import SimpleNamespace

import pytest
import torch
import torch._dynamo  # noqa: F401  (the first optimizer built imports it: ~1 s, paid at collection)
from conftest import PLUGIN_DIR, REPO, binarize_lm, run_cli
from fairseq import checkpoint_utils, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim import build_optimizer
from fairseq.optim.fp16_optimizer import FP16Optimizer
from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY, build_lr_scheduler
from omegaconf import OmegaConf

import fairseq_noising.fairseq_plugin  # noqa: F401  (registers the scheduler)
from fairseq_noising.errors import NoisingError
from fairseq_noising.optim.paper_halving import PaperHalvingLRSchedule, PaperHalvingLRScheduleConfig

BASE = ["--optimizer", "sgd", "--lr", "1.0", "--clip-norm", "5", "--lr-scheduler", "paper_halving"]
DOC = REPO / "docs" / "paper_halving.md"

# What ``fairseq-train ... BASE --stop-min-lr 0`` gives the fields that the scheduler's config
# links to other groups (II), and the SGD optimizer's arguments (checked against the parser by
# test_unit_tests_use_the_config_that_fairseq_train_parses).
FAIRSEQ_VALUES = dict(
    lr=[1.0],
    stop_min_lr=0.0,
    sentence_avg=False,
    best_checkpoint_metric="loss",
    maximize_best_checkpoint_metric=False,
    save_interval_updates=0,
    disable_validation=False,
    validate_interval=1,
    validate_interval_updates=0,
    validate_after_updates=0,
)
SGD_ARGS = dict(optimizer="sgd", lr=[1.0], momentum=0.0, weight_decay=0.0)


def parse(*argv):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        input_args=[
            "unused-data",
            "--user-dir",
            str(PLUGIN_DIR),
            "--task",
            "language_modeling",
            "--arch",
            "lstm_lm",
            *map(str, argv),
        ],
    )
    return convert_namespace_to_omegaconf(args)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 4)
        self.b = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def scheduler_cfg(**overrides):
    """``cfg.lr_scheduler`` of ``fairseq-train ... BASE --stop-min-lr 0``, without the parser;
    ``overrides`` set scheduler options (``halvings=2`` is ``--halvings 2``; the II-linked ones
    such as ``stop_min_lr`` too)."""
    cfg = OmegaConf.structured(
        PaperHalvingLRScheduleConfig(_name="paper_halving", **FAIRSEQ_VALUES)
    )
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def build(model=None, momentum=0.0, cfg=None, **overrides):
    """(scheduler, model) as the trainer builds them; ``cfg``: a parsed command line instead."""
    if cfg is None:
        scheduler_args, optimizer_args = scheduler_cfg(**overrides), Namespace(**SGD_ARGS)
    else:
        scheduler_args, optimizer_args = cfg.lr_scheduler, copy.copy(cfg.optimizer)
    optimizer_args.momentum = momentum
    model = model if model is not None else Tiny()
    optimizer = build_optimizer(optimizer_args, list(model.parameters()))
    scheduler = build_lr_scheduler(scheduler_args, optimizer)
    scheduler.step_update(0)
    return scheduler, model


def train_a_bit(scheduler, model, seed):
    """One real SGD update (changes the parameters; creates momentum state if any)."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(8, 3, generator=g), torch.randn(8, 2, generator=g)
    scheduler.optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    scheduler.optimizer.step()
    scheduler.step_update(scheduler.num_updates + 1)


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def same(xs, ys):
    return len(xs) == len(ys) and all(torch.equal(x, y) for x, y in zip(xs, ys))


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


def set_fairseq_best(value):
    """What checkpoint_utils.save_checkpoint / load_checkpoint do with fairseq's running best."""
    checkpoint_utils.save_checkpoint.best = value


def del_fairseq_best():
    if hasattr(checkpoint_utils.save_checkpoint, "best"):
        del checkpoint_utils.save_checkpoint.best


@pytest.fixture(autouse=True)
def no_fairseq_best():
    """Each test starts, like a fresh fairseq-train process, without fairseq's running best, and
    leaves none behind (in-process fairseq-train sets it too)."""
    before = getattr(checkpoint_utils.save_checkpoint, "best", None)
    del_fairseq_best()
    yield
    del_fairseq_best()
    if before is not None:
        set_fairseq_best(before)


# ---------------------------------------------------------------------------- configuration
@pytest.mark.slow
def test_registered_with_documented_flags():
    assert LR_SCHEDULER_REGISTRY["paper_halving"] is PaperHalvingLRSchedule
    cfg = parse(*BASE, "--stop-min-lr", "0").lr_scheduler
    assert (cfg.halvings, cfg.halving_threshold, cfg.lr_shrink, cfg.no_restore_best) == (
        8,
        None,
        0.5,
        False,
    )
    cfg = parse(
        *BASE,
        "--stop-min-lr",
        "0",
        "--halvings",
        "3",
        "--halving-threshold",
        "0.01",
        "--lr-shrink",
        "0.7",
        "--no-restore-best",
    ).lr_scheduler
    assert (cfg.halvings, cfg.halving_threshold, cfg.lr_shrink, cfg.no_restore_best) == (
        3,
        0.01,
        0.7,
        True,
    )


@pytest.mark.slow
def test_unit_tests_use_the_config_that_fairseq_train_parses():
    parsed = parse(*BASE, "--stop-min-lr", "0")
    assert OmegaConf.to_container(parsed.lr_scheduler, resolve=True) == OmegaConf.to_container(
        scheduler_cfg(), resolve=True
    )
    assert {k: getattr(parsed.optimizer, k) for k in SGD_ARGS} == SGD_ARGS


@pytest.mark.slow
def test_refuses_default_stop_min_lr_naming_the_flag():
    cfg = parse(*BASE)  # fairseq's default --stop-min-lr is -1
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


def test_threshold_rule_accepts_per_token_metrics_with_sentence_avg():
    for metric in ("nll_loss", "ppl"):
        build(halving_threshold=0.01, sentence_avg=True, best_checkpoint_metric=metric)


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


# ---------------------------------------------------------------------------- state and resume
def safe_roundtrip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)  # tensors, numbers, dicts and lists only


def test_state_dict_roundtrip_continues_identically():
    a, model_a = build()
    for epoch, loss in enumerate([5.0, 4.0, 4.5, 4.2], 1):
        a.step_begin_epoch(epoch)
        train_a_bit(a, model_a, epoch)
        a.step(epoch, loss)
    state = safe_roundtrip(a.state_dict())
    assert state["halvings"] == 2 and state["best"] == 4.0 and state["lr"] == 0.25

    model_b = copy.deepcopy(model_a)
    b, _ = build(model=model_b)
    b.load_state_dict(state)
    b.step(5, None)  # what fairseq calls after loading: no decision pending, nothing happens
    assert (b.optimizer.get_lr(), b.halvings, b.best, b.best_epoch) == (0.25, 2, 4.0, 2)
    assert same(b.best_params, a.best_params)
    for epoch, loss in [(5, 4.6), (6, 3.0), (7, 3.5)]:
        for s, m in ((a, model_a), (b, model_b)):
            s.step_begin_epoch(epoch)
            train_a_bit(s, m, epoch)
            s.step(epoch, loss)
        assert a.optimizer.get_lr() == b.optimizer.get_lr()
        assert same(params(model_a), params(model_b))


def test_loading_best_parameters_of_another_model_is_refused():
    saved, _ = build()
    saved.step(1, 5.0)
    other = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))  # 4 tensors too
    resumed, _ = build(model=other)
    with pytest.raises(NoisingError, match=r"do not match the model .* --reset-lr-scheduler"):
        resumed.load_state_dict(safe_roundtrip(saved.state_dict()))


def fairseq_epoch(scheduler, model, epoch, loss):
    """One epoch in fairseq_cli.train's order; returns the end-of-epoch checkpoint's content,
    which fairseq writes after validation but *before* it calls scheduler.step."""
    scheduler.step_begin_epoch(epoch)
    train_a_bit(scheduler, model, epoch)
    best = min(loss, getattr(checkpoint_utils.save_checkpoint, "best", loss))
    set_fairseq_best(best)
    checkpoint = safe_roundtrip(
        {
            "model": model.state_dict(),
            "sched": scheduler.state_dict(),
            "optim": scheduler.optimizer.state_dict(),
            "best": best,
        }
    )
    scheduler.step(epoch, loss)
    return checkpoint


def resume(checkpoint, next_epoch):
    """trainer.load_checkpoint + checkpoint_utils.load_checkpoint, in a fresh process."""
    del_fairseq_best()
    model = Tiny()
    model.load_state_dict(checkpoint["model"])
    scheduler, _ = build(model=model)
    scheduler.load_state_dict(checkpoint["sched"])
    scheduler.optimizer.load_state_dict(checkpoint["optim"])
    scheduler.step_update(checkpoint["sched"]["num_updates"])
    scheduler.step(next_epoch, None)  # trainer.load_checkpoint: fairseq's best not restored yet
    set_fairseq_best(safe_roundtrip(checkpoint["best"]))  # a new float object, as unpickled
    scheduler.step(next_epoch, None)  # checkpoint_utils.load_checkpoint, after restoring it
    return scheduler, model


@pytest.mark.parametrize(
    "losses",
    [
        [5.0, 4.0, 4.5],  # the pending decision halves and restores
        [5.0, 4.0, 4.5, 3.0],  # the pending decision is an improvement
        [5.0] + [6.0] * 9,  # the pending decision is the stop after the last halving
    ],
)
def test_resume_replays_the_decision_the_checkpoint_was_saved_before(losses):
    live, model = build()
    for epoch, loss in enumerate(losses, 1):
        checkpoint = fairseq_epoch(live, model, epoch, loss)
    assert checkpoint["sched"]["last_step_epoch"] == len(losses) - 1  # saved before the step
    resumed, resumed_model = resume(checkpoint, len(losses) + 1)
    assert resumed.optimizer.get_lr() == live.optimizer.get_lr()
    assert (resumed.halvings, resumed.best, resumed.best_epoch) == (
        live.halvings,
        live.best,
        live.best_epoch,
    )
    assert same(params(resumed_model), params(model))
    assert same(resumed.best_params, live.best_params)
    if live.finished:
        assert resumed.optimizer.get_lr() == 0.0


def test_resume_from_a_mid_epoch_checkpoint_replays_nothing(caplog):
    live, model = build()
    fairseq_epoch(live, model, 1, 5.0)
    fairseq_epoch(live, model, 2, 6.0)
    live.step_begin_epoch(3)
    train_a_bit(live, model, 3)  # --save-interval-updates: saved inside epoch 3
    set_fairseq_best(5.0)
    checkpoint = safe_roundtrip(
        {
            "model": model.state_dict(),
            "sched": live.state_dict(),
            "optim": live.optimizer.state_dict(),
            "best": 5.0,
        }
    )
    with caplog.at_level(logging.WARNING):
        resumed, resumed_model = resume(checkpoint, 3)  # fairseq resumes inside epoch 3
        resumed.step_begin_epoch(3)
    assert caplog.text == ""
    assert (resumed.optimizer.get_lr(), resumed.halvings) == (0.5, 1)
    assert same(params(resumed_model), params(model))


def test_resume_without_fairseq_best_warns_and_goes_on(caplog):
    live, model = build()
    for epoch, loss in enumerate([5.0, 6.0], 1):
        checkpoint = fairseq_epoch(live, model, epoch, loss)
    del_fairseq_best()
    resumed, _ = build(model=model)
    resumed.load_state_dict(checkpoint["sched"])
    resumed.step(3, None)
    resumed.step(3, None)  # e.g. --reset-meters: fairseq never restores its best
    with caplog.at_level(logging.WARNING):
        resumed.step_begin_epoch(3)
    assert "could not replay the decision for epoch 2" in caplog.text
    assert resumed.optimizer.get_lr() == 1.0 and resumed.halvings == 0


# ---------------------------------------------------------------------------- real fairseq-train
@pytest.fixture(scope="module")
def ptb300(tmp_path_factory):
    """300 training and 60 validation lines of PTB, binarized."""
    return binarize_lm(tmp_path_factory.mktemp("ptb300"), 300, 60)


def train_argv(data, save):
    # forced plateau: at lr 1e-9 no epoch changes the validation loss (fairseq rounds it to 3
    # decimals), so every epoch after the first is a non-improvement: halvings at epochs 2..9
    return [
        data,
        "--user-dir",
        PLUGIN_DIR,
        "--task",
        "language_modeling",
        "--arch",
        "lstm_lm",
        "--decoder-embed-dim",
        8,
        "--decoder-hidden-size",
        8,
        "--decoder-out-embed-dim",
        8,
        "--tokens-per-sample",
        35,
        "--batch-size",
        20,
        "--required-batch-size-multiple",
        1,
        "--optimizer",
        "sgd",
        "--lr",
        "1e-9",
        "--clip-norm",
        5,
        "--lr-scheduler",
        "paper_halving",
        "--stop-min-lr",
        0,
        "--cpu",
        "--num-workers",
        0,
        "--log-format",
        "simple",
        "--seed",
        1,
        "--save-dir",
        save,
        "--no-epoch-checkpoints",
    ]


def decisions(log):
    """[(epoch, halving number or '')] from the scheduler's log lines."""
    return re.findall(
        r"paper_halving: epoch (\d+): .*?(?:halving (\d+)/\d+|lr stays|(stop): all)", log
    )


def epoch_lrs(log):
    """{epoch: learning rate it was trained with} from fairseq's end-of-epoch training stats."""
    return {
        int(e): float(lr)
        for e, lr in re.findall(r"epoch (\d+) \| loss [^\n]*?\| lr ([\d.e+-]+) \|", log)
    }


def expected_decisions(halvings):
    return (
        [("1", "", "")]
        + [(str(e), str(e - 1), "") for e in range(2, halvings + 2)]
        + [(str(halvings + 2), "", "stop")]
    )


EXPECTED_DECISIONS = expected_decisions(8)
EXPECTED_LRS = {e: 1e-9 * 2.0 ** -max(0, e - 2) for e in range(1, 11)}  # 10 epochs < 30


@pytest.mark.slow
def test_fairseq_train_trains_at_lr_over_256_then_stops(ptb300, tmp_path):
    save = tmp_path / "ckpt"
    proc = run_cli(
        ["fairseq-train", *train_argv(ptb300, save), "--max-epoch", 30],
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    log = proc.stdout
    assert proc.returncode == 0
    assert decisions(log) == EXPECTED_DECISIONS
    # every later epoch ties with the best at 3 decimals: fairseq's checkpoint_best.pt takes it
    assert (
        "equals the best (epoch 1) and replaces it in checkpoint_best.pt, as fairseq does; "
        "halving 1/8: lr 1e-09 -> 5e-10"
    ) in log
    assert "restored the parameters" not in log
    assert "halving 8/8: lr 7.8125e-12 -> 3.90625e-12" in log
    assert "stop: all 8 halvings done: lr 3.90625e-12 -> 0" in log
    assert "stopping training because current learning rate (0.0)" in log
    assert "begin training epoch 10" in log  # epoch 10 is trained at 1e-9 / 256
    assert "begin training epoch 11" not in log
    assert epoch_lrs(log) == pytest.approx(EXPECTED_LRS)
    assert (save / "checkpoint_best.pt").exists()


def train_in_process(argv, caplog):
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import train

    args = options.parse_args_and_arch(
        options.get_training_parser(), input_args=[str(a) for a in argv]
    )
    caplog.clear()
    with caplog.at_level(logging.INFO):
        distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)
    return caplog.text


@pytest.mark.slow
def test_fairseq_train_interrupted_and_resumed_follows_the_same_protocol(ptb300, tmp_path, caplog):
    # --halvings 3 (epochs 1..5) keeps this short; the protocol is the same as with 8
    argv = train_argv(ptb300, tmp_path / "ckpt") + ["--halvings", 3]
    expected = expected_decisions(3)
    # stopped by --max-epoch 3; its last checkpoint is written before epoch 3's halving
    first = train_in_process(argv + ["--max-epoch", 3], caplog)
    assert decisions(first) == expected[:3]
    assert "stopping training because current learning rate" not in first
    # resumed with --max-epoch 30 (fairseq's best of the first run is still set in this
    # process: the replay waits for the value restored from the checkpoint)
    second = train_in_process(argv + ["--max-epoch", 30], caplog)
    assert "resuming after epoch 3, saved before its decision" in second
    assert decisions(second) == expected[2:5]  # epoch 3 replayed, then epochs 4 and 5
    assert "stop: all 3 halvings done: lr 1.25e-10 -> 0" in second
    assert "stopping training because current learning rate (0.0)" in second
    assert "begin training epoch 6" not in second
    lrs = {**epoch_lrs(first), **epoch_lrs(second)}
    assert lrs == pytest.approx({e: EXPECTED_LRS[e] for e in range(1, 6)})
    # re-launching the finished run replays its last halving and trains nothing
    third = train_in_process(argv + ["--max-epoch", 30], caplog)
    assert decisions(third) == expected[4:5]
    assert "stopping training because current learning rate (0.0)" in third
    assert "begin training epoch" not in third


@pytest.mark.slow
@pytest.mark.parametrize("second", [6.0, 5.0], ids=["worse", "tie"])
def test_fairseq_train_non_improving_epoch_restores_the_weights_of_checkpoint_best(
    second, ptb300, tmp_path, caplog, monkeypatch
):
    """After a non-improving epoch the model's parameters are exactly those of checkpoint_best.pt.

    In-process fairseq-train at lr 1.0 (so that an epoch moves the weights), with the validation
    loss of the first --valid-subset planted after the real validation: 5.0 after epoch 1, 6.0
    after epoch 2 (strictly worse, so fairseq keeps epoch 1 in checkpoint_best.pt). The weights
    are read right before and right after ``trainer.lr_step`` of each epoch (the scheduler's
    decision); fairseq writes checkpoint_last.pt before that step, so it holds epoch 2's own
    trained weights. ``tie``: epoch 2 validates at 5.0 too; fairseq's checkpoint_best.pt takes a
    tie (its test is <=), so the rate halves but the parameters stay epoch 2's own."""
    from fairseq.trainer import Trainer
    from fairseq_cli import train

    planted = {1: 5.0, 2: second}
    real_validate = train.validate

    def planted_validate(cfg, trainer, task, epoch_itr, subsets):
        losses = real_validate(cfg, trainer, task, epoch_itr, subsets)
        return [planted[epoch_itr.epoch]] + losses[1:]

    def weights(trainer):
        return {k: v.detach().clone() for k, v in trainer.get_model().state_dict().items()}

    around_decision = {}
    real_lr_step = Trainer.lr_step

    def recording_lr_step(self, epoch, val_loss=None):
        before = weights(self)
        lr = real_lr_step(self, epoch, val_loss)
        around_decision[epoch] = (before, weights(self))
        return lr

    monkeypatch.setattr(train, "validate", planted_validate)
    monkeypatch.setattr(Trainer, "lr_step", recording_lr_step)
    save = tmp_path / "ckpt"
    argv = train_argv(ptb300, save)
    argv[argv.index("--lr") + 1] = 1.0
    log = train_in_process(argv + ["--max-epoch", 2], caplog)
    assert decisions(log) == [("1", "", ""), ("2", "1", "")], log[-3000:]
    assert ("restored the parameters of epoch 1" in log) == (second > 5.0)

    def state(name):
        return checkpoint_utils.load_checkpoint_to_cpu(str(save / name))

    best, last = state("checkpoint_best.pt"), state("checkpoint_last.pt")
    trained_in_2, after_2 = around_decision[2]
    assert last["extra_state"]["val_loss"] == second  # written after epoch 2

    def equal(a, b):
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    if second == 5.0:  # the tie: checkpoint_best.pt holds epoch 2, and so does the model
        assert equal(best["model"], last["model"]) and equal(after_2, best["model"])
        assert not equal(around_decision[1][1], best["model"])
        return
    assert best["extra_state"]["val_loss"] == 5.0  # written after epoch 1

    assert equal(trained_in_2, last["model"])  # the non-improving epoch's own weights ...
    assert not any(torch.equal(trained_in_2[k], best["model"][k]) for k in best["model"]), (
        "epoch 2 moved every parameter (else the restore could pass vacuously)"
    )
    assert equal(after_2, best["model"])  # ... are replaced by checkpoint_best.pt's, exactly
    assert equal(around_decision[1][1], best["model"])  # (epoch 1 improved: nothing restored)
