"""What the tests of ``--lr-scheduler paper_halving`` share (tests/test_paper_halving.py,
tests/test_paper_halving_resume.py, tests/test_paper_halving_train.py): the scheduler built as
fairseq-train builds it on a tiny model, fairseq's running best validation value, and the real
fairseq-train's command line and log lines.

The scheduler is built (``build_lr_scheduler``, ``build_optimizer``) from the config that
``fairseq-train ... --optimizer sgd --lr 1.0 --clip-norm 5 --lr-scheduler paper_halving
--stop-min-lr 0`` parses to, made from the dataclass because hydra's parser takes most of a second
per command line (tests/test_paper_halving.py checks it against the parser), on a tiny model
wrapped in fairseq's SGD, then handed to the hook that ends fairseq's ``Trainer.load_checkpoint``
as on a first launch (no checkpoint loaded).
"""

import copy
import logging
import re
from argparse import Namespace
from types import SimpleNamespace

import pytest
import torch
import torch._dynamo  # noqa: F401  (the first optimizer built imports it: ~1 s, paid at collection)
from conftest import TINY_LM, lm_train_argv
from fairseq import checkpoint_utils, options
from fairseq.dataclass.configs import FairseqConfig
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim import build_optimizer
from fairseq.optim.lr_scheduler import build_lr_scheduler
from omegaconf import OmegaConf

import fairseq_noising.fairseq_plugin  # noqa: F401  (registers the scheduler)
from fairseq_noising.optim.paper_halving import PaperHalvingLRScheduleConfig

# What that command line gives the fields that the scheduler's config links to other groups (II),
# and the SGD optimizer's arguments (checked against the parser by
# test_unit_tests_use_the_config_that_fairseq_train_parses).
FAIRSEQ_VALUES = dict(
    lr=[1.0],
    stop_min_lr=0.0,
    sentence_avg=False,
    best_checkpoint_metric="loss",
    maximize_best_checkpoint_metric=False,
)  # the groups that the hook reads (checkpoint, ...): FairseqConfig's defaults, as on that line
SGD_ARGS = dict(optimizer="sgd", lr=[1.0], momentum=0.0, weight_decay=0.0)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 4)
        self.b = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def scheduler_cfg(**overrides):
    """``cfg.lr_scheduler`` of that command line, without the parser, in a config of fairseq's
    defaults (the trainer's whole config, which the hook reads); ``overrides`` set scheduler
    options (``halvings=2`` is ``--halvings 2``; the II-linked ones such as ``stop_min_lr`` too),
    else options of the groups that the hook reads (``save_dir``, ``disable_validation``,
    ``max_epoch``)."""
    root = OmegaConf.structured(FairseqConfig())
    root.lr_scheduler = PaperHalvingLRScheduleConfig(_name="paper_halving", **FAIRSEQ_VALUES)
    for key, value in overrides.items():
        groups = ("lr_scheduler", "checkpoint", "distributed_training", "dataset", "optimization")
        OmegaConf.update(root, f"{next(g for g in groups if key in root[g])}.{key}", value)
    return root.lr_scheduler


def trainer_cfg(scheduler):
    """The whole config that fairseq's Trainer holds, of which the scheduler's is a node (fairseq's
    merge_with_parent keeps its parent, in which the II links resolve)."""
    return scheduler.cfg._get_parent()


def end_load_checkpoint(trainer, extra_state):
    """What fairseq's ``Trainer.load_checkpoint`` ends with in this process, ``extra_state`` being
    what it returns (None: no checkpoint found): the hook that importing the plugin installed
    there (``fairseq_compat.end_load_checkpoint_with``), so that the tests fail without it."""
    from fairseq.trainer import Trainer

    Trainer.load_checkpoint.ends_with(trainer, extra_state)


def build(model=None, momentum=0.0, cfg=None, **overrides):
    """(scheduler, model) as fairseq-train builds them on a first launch: the trainer builds the
    optimizer and the scheduler, and its load_checkpoint, which finds no checkpoint, ends with
    the hook; ``cfg``: a parsed command line instead."""
    if cfg is None:
        scheduler_args, optimizer_args = scheduler_cfg(**overrides), Namespace(**SGD_ARGS)
    else:
        scheduler_args, optimizer_args = cfg.lr_scheduler, copy.copy(cfg.optimizer)
    optimizer_args.momentum = momentum
    model = model if model is not None else Tiny()
    optimizer = build_optimizer(optimizer_args, list(model.parameters()))
    scheduler = build_lr_scheduler(scheduler_args, optimizer)
    scheduler.step_update(0)
    end_load_checkpoint(SimpleNamespace(cfg=trainer_cfg(scheduler), lr_scheduler=scheduler), None)
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


# ---------------------------------------------------------------------------- real fairseq-train
def train_argv(data, save, *extra, **options):
    """``fairseq-train``'s command line with ``--lr-scheduler paper_halving --stop-min-lr 0``: the
    tiny stock LM on ``data`` in batches of 20 rows, seed 1, checkpoints (no per-epoch ones) in
    ``save``, then ``extra``. ``options`` go to lm_train_argv; by default the stock
    language_modeling task and the paper's SGD at lr 1e-9, a forced plateau: at that rate no
    epoch changes the validation loss (fairseq rounds it to 3 decimals), so every epoch after the
    first is a non-improvement: halvings at epochs 2..9."""
    flags = ["--batch-size", 20, "--required-batch-size-multiple", 1, "--seed", 1]
    flags += ["--lr-scheduler", "paper_halving", "--stop-min-lr", 0]
    flags += ["--save-dir", save, "--no-epoch-checkpoints"]
    options = {"task": "language_modeling", "lr": 1e-9, **options}
    return lm_train_argv(data, *flags, *extra, model=TINY_LM, **options)


def plant_validation(monkeypatch, loss_of):
    """fairseq-train validates for real, then reports ``loss_of(epoch_itr)`` as the value of the
    first --valid-subset (the one the scheduler and checkpoint_best.pt see)."""
    from fairseq_cli import train

    real_validate = train.validate

    def planted_validate(cfg, trainer, task, epoch_itr, subsets):
        losses = real_validate(cfg, trainer, task, epoch_itr, subsets)
        return [loss_of(epoch_itr)] + losses[1:]

    monkeypatch.setattr(train, "validate", planted_validate)


def train_in_process(argv, caplog):
    """fairseq-train's main in this process; returns its log."""
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import train

    args = options.parse_args_and_arch(
        options.get_training_parser(), input_args=[str(a) for a in argv]
    )
    caplog.clear()
    with caplog.at_level(logging.INFO):
        distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)
    return caplog.text


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
