"""``--lr-scheduler paper_halving``: a resumed run takes up the protocol where it stopped, and
checkpoints hold the model once, a resumed run reading the best epoch's parameters back from
``checkpoint_best.pt`` (docs/paper_halving.md, "Resuming").

Fast tier: the scheduler (tests/halving_kit.py) resumed through ``FakeTrainer``, what fairseq's
trainer hands it, from checkpoints in fairseq's layout that the tests write where and when
fairseq would; a run that was not interrupted is the oracle of an interrupted and resumed one.
Slow tier: the real ``fairseq-train`` in-process on tests/conftest.py's tiny PTB slice, stopped
by ``--max-epoch`` or ``--max-update``, resumed and re-launched, with planted validation values.
"""

import io
import logging
import os
import re
import shutil
from argparse import Namespace
from types import SimpleNamespace

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.dataclass.configs import CheckpointConfig, DistributedTrainingConfig
from fairseq.optim import build_optimizer
from fairseq.optim.fp16_optimizer import FP16Optimizer
from halving_kit import (
    EXPECTED_LRS,
    SGD_ARGS,
    Tiny,
    build,
    decisions,
    del_fairseq_best,
    end_load_checkpoint,
    epoch_lrs,
    expected_decisions,
    no_fairseq_best,  # noqa: F401  (autouse: no fairseq best leaks between tests)
    params,
    plant_validation,
    same,
    set_fairseq_best,
    train_a_bit,
    train_argv,
    train_in_process,
    trainer_cfg,
)

from fairseq_noising import fairseq_compat
from fairseq_noising.errors import NoisingError
from fairseq_noising.optim import halving_rule


# ---------------------------------------------------------------------------- fairseq's side
def safe_roundtrip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)  # tensors, numbers, dicts and lists only


class FakeTrainer:
    """What fairseq's Trainer hands a scheduler: ``load_checkpoint`` follows
    ``Trainer.load_checkpoint`` once the model is loaded from ``state``, which the test has put
    where fairseq-train resumes from, and ends with the hook that the plugin adds to it (which
    reads the files there), given the trainer's whole config."""

    def __init__(self, scheduler):
        self.lr_scheduler, self.cfg = scheduler, trainer_cfg(scheduler)

    def load_checkpoint(self, state):
        last = state["optimizer_history"][-1]
        self.lr_scheduler.load_state_dict(last["lr_scheduler_state"])
        self.lr_scheduler.optimizer.load_state_dict(state["last_optimizer_state"])
        self.lr_scheduler.step_update(last["num_updates"])
        self.lr_step(state["extra_state"]["train_iterator"]["epoch"])
        end_load_checkpoint(self, state["extra_state"])

    def lr_step(self, epoch, val_loss=None):
        return self.lr_scheduler.step(epoch, val_loss)

    def lr_step_begin_epoch(self, epoch):
        return self.lr_scheduler.step_begin_epoch(epoch)


def fairseq_save(scheduler, model, loss, save_dir, next_epoch, iterations=0):
    """checkpoint_utils.save_checkpoint after a validation: updates fairseq's best and returns the
    checkpoint (fairseq's layout), also written to ``save_dir/checkpoint_best.pt`` when the loss is
    not above fairseq's best. ``next_epoch``, ``iterations``: the epoch iterator's state (at the
    end of epoch e: e + 1 and 0)."""
    best = min(loss, getattr(checkpoint_utils.save_checkpoint, "best", loss))
    set_fairseq_best(best)
    checkpoint = safe_roundtrip(
        {
            "model": model.state_dict(),
            "criterion": None,
            "optimizer_history": [
                {"lr_scheduler_state": scheduler.state_dict(), "num_updates": scheduler.num_updates}
            ],
            "last_optimizer_state": scheduler.optimizer.state_dict(),
            "extra_state": {
                "train_iterator": {"epoch": next_epoch, "iterations_in_epoch": iterations},
                "val_loss": loss,
                "best": best,
            },
        }
    )
    if save_dir is not None and loss <= best:
        torch.save(checkpoint, os.path.join(save_dir, "checkpoint_best.pt"))
    return checkpoint


def fairseq_epoch(scheduler, model, epoch, loss, save_dir=None, trained=None):
    """One epoch in fairseq_cli.train's order; returns the end-of-epoch checkpoint's content,
    which fairseq writes after validation but *before* it calls scheduler.step. ``trained``: the
    model's state dict at the end of the epoch, instead of what this machine trains."""
    scheduler.step_begin_epoch(epoch)
    train_a_bit(scheduler, model, epoch)
    if trained is not None:
        model.load_state_dict(trained)
    checkpoint = fairseq_save(scheduler, model, loss, save_dir, epoch + 1)
    scheduler.step(epoch, loss)
    return checkpoint


def loaded(checkpoint, save_dir, **overrides):
    """A fresh process's model loaded from ``checkpoint``, which is saved as
    ``save_dir/checkpoint_last.pt`` (where fairseq-train resumes from), and its scheduler, not
    loaded yet: (scheduler, model, trainer). ``overrides``: scheduler options."""
    torch.save(checkpoint, os.path.join(save_dir, "checkpoint_last.pt"))
    model = Tiny()
    model.load_state_dict(checkpoint["model"])
    scheduler, _ = build(model=model, save_dir=str(save_dir), **overrides)
    return scheduler, model, FakeTrainer(scheduler)


def resume(checkpoint, save_dir, **overrides):
    """fairseq-train resuming from ``checkpoint`` in a fresh process, as the scheduler sees it:
    trainer.load_checkpoint, then checkpoint_utils.load_checkpoint restores fairseq's best and
    calls trainer.lr_step again. ``overrides``: scheduler options. Returns (scheduler, model,
    trainer)."""
    del_fairseq_best()
    scheduler, model, trainer = loaded(checkpoint, save_dir, **overrides)
    trainer.load_checkpoint(checkpoint)  # fairseq's best not restored yet
    set_fairseq_best(safe_roundtrip(checkpoint["extra_state"]["best"]))  # a new float object
    trainer.lr_step(checkpoint["extra_state"]["train_iterator"]["epoch"])
    return scheduler, model, trainer


def scheduler_state(checkpoint):
    return checkpoint["optimizer_history"][-1]["lr_scheduler_state"]


def decided(state, scheduler):
    """What a saved state's validations decided: (halvings, best value, its updates, lr)."""
    p = halving_rule.replay(state["validations"], scheduler.cfg)
    best = p.best or {}
    return (
        p.halvings,
        best.get("loss"),
        best.get("updates"),
        halving_rule.rate(scheduler.cfg, p.halvings),
    )


# ---------------------------------------------------------------------------- fast tier
def test_state_dict_roundtrip_continues_identically(tmp_path):
    a, model_a = build()
    for epoch, loss in enumerate([5.0, 4.0, 4.5, 4.2], 1):
        fairseq_epoch(a, model_a, epoch, loss, tmp_path)
    state = safe_roundtrip(a.state_dict())
    halvings, best, best_updates, lr = decided(state, a)
    assert halvings == 2 and best == 4.0 and lr == 0.25
    # the best parameters are not in the state: checkpoint_best.pt holds them (epoch 2, update 2)
    assert state["best_params"] is None and best_updates == 2

    saved = fairseq_save(a, model_a, 4.2, None, 5)  # a save after the decision: none pending
    assert scheduler_state(saved) == state
    b, model_b, _ = resume(saved, tmp_path)
    assert (b.optimizer.get_lr(), b.halvings, b.best, b.best_epoch) == (0.25, 2, 4.0, 2)
    assert same(b.best_params, a.best_params)
    for epoch, loss in [(5, 4.6), (6, 3.0), (7, 3.5)]:
        for s, m in ((a, model_a), (b, model_b)):
            s.step_begin_epoch(epoch)
            train_a_bit(s, m, epoch)
            s.step(epoch, loss)
        assert a.optimizer.get_lr() == b.optimizer.get_lr()
        assert same(params(model_a), params(model_b))


def version_1(state, best_params, cfg):
    """The state that version 1 of the scheduler wrote where ``state`` was written: what the
    validations had decided (13 keys; the best updates unknown), the best parameters inside."""
    p, last = halving_rule.replay(state["validations"], cfg), state["validations"][-1]
    old = dict(lr=halving_rule.rate(cfg, p.halvings), best=p.best["loss"], halvings=p.halvings)
    old.update(best_epoch=p.best["epoch"], halving_started=p.started, last_loss=p.last)
    old.update(epoch=last["epoch"] + 1, last_step_epoch=last["epoch"], fairseq_best=p.best["loss"])
    old.update(num_updates=last["updates"], version=1, best_params=best_params)
    return safe_roundtrip(old)


def test_loading_best_parameters_of_another_model_is_refused():
    saved, _ = build()
    saved.step(1, 5.0)
    other = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))  # 4 tensors too
    resumed, _ = build(model=other)
    with pytest.raises(NoisingError, match=r"do not match the model .* --reset-lr-scheduler"):
        resumed.load_state_dict(version_1(saved.state_dict(), saved.best_params, saved.cfg))


def test_version_1_checkpoints_still_load_and_restore_their_own_copy(tmp_path):
    """A checkpoint written before the copy moved out of it: its copy is used, and kept in the
    next checkpoints until an improvement says which checkpoint_best.pt holds the best."""
    live, model = build()
    for epoch, loss in enumerate([5.0, 4.0, 4.5], 1):
        kept = [t.clone() for t in live.best_params] if live.best_params else None
        checkpoint = fairseq_epoch(live, model, epoch, loss)  # no checkpoint_best.pt at all
    checkpoint["optimizer_history"][-1]["lr_scheduler_state"] = version_1(
        scheduler_state(checkpoint), kept, live.cfg
    )
    resumed, resumed_model, _ = resume(checkpoint, tmp_path)  # replays epoch 3: restores epoch 2
    assert resumed.halvings == 1 and resumed.best_epoch == 2
    assert same(params(resumed_model), params(model))
    assert same(resumed.state_dict()["best_params"], live.best_params)
    fairseq_epoch(resumed, resumed_model, 4, 3.0)  # an improvement: checkpoint_best.pt holds it
    assert resumed.state_dict()["best_params"] is None


@pytest.mark.parametrize(
    "losses",
    [
        [5.0, 4.0, 4.5],  # the pending decision halves and restores (from checkpoint_best.pt)
        [5.0, 4.0, 4.5, 3.0],  # the pending decision is an improvement
        [5.0, 4.0, 4.0],  # a tie: fairseq wrote checkpoint_best.pt with it, the weights stay
        [5.0] + [6.0] * 9,  # the pending decision is the stop after the last halving
    ],
)
def test_resume_replays_the_decision_the_checkpoint_was_saved_before(losses, tmp_path):
    live, model = build()
    for epoch, loss in enumerate(losses, 1):
        checkpoint = fairseq_epoch(live, model, epoch, loss, tmp_path)
    state = scheduler_state(checkpoint)
    assert state["validations"][-1]["epoch"] == len(losses) - 1  # saved before the step
    assert state["best_params"] is None  # the parameters are in the checkpoint once
    resumed, resumed_model, _ = resume(checkpoint, tmp_path)
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


@pytest.mark.parametrize("losses", [[5.0, 5.5, 5.2], [5.0, 5.5, 5.2, 4.8, 4.9]])
def test_resume_with_a_start_epoch_replays_what_it_held_and_what_it_halved(losses, tmp_path):
    """--halving-start-epoch 4: resumed before epoch 3's decision (held: epoch 3 keeps its own
    parameters, lr 1) or before epoch 5's (the first halving: back to epoch 4's parameters, read
    from checkpoint_best.pt), the resumed run is the uninterrupted one."""
    live, model = build(halving_start_epoch=4)
    for epoch, loss in enumerate(losses, 1):
        checkpoint = fairseq_epoch(live, model, epoch, loss, tmp_path)
    assert live.halvings == (len(losses) == 5)
    resumed, resumed_model, _ = resume(checkpoint, tmp_path, halving_start_epoch=4)
    assert resumed.optimizer.get_lr() == live.optimizer.get_lr()
    assert (resumed.halvings, resumed.best_epoch) == (live.halvings, live.best_epoch)
    assert same(params(resumed_model), params(model))


VERSION_2 = os.path.join(os.path.dirname(__file__), "data", "paper_halving_v2")


@pytest.mark.parametrize(
    "rule, losses, later",
    [
        ("plateau", [5.0, 4.0, 4.5, 4.2], [3.0, 3.5]),  # saved with 1 halving, best epoch 2
        ("threshold", [5.0, 4.0, 3.99, 3.98], [4.5, 3.9, 3.95]),  # halving from epoch 3 on
    ],
)
def test_checkpoints_of_the_previous_state_version_resume_as_an_uninterrupted_run(
    rule, losses, later, tmp_path
):
    """tests/data/paper_halving_v2/make.py: the tiny model's checkpoints written by the previous
    version of the scheduler (state version 2: what the validations had decided) after the
    epochs with ``losses``, before the last one's decision. Resumed, the run goes on as this
    version's run from the same seed that was never interrupted. The machine that wrote them
    may round differently (another CPU's kernels): that run's parameters, where the files hold
    them (its best epoch and its last), are taken from them."""
    options = dict(halving_threshold=0.01, best_checkpoint_metric="nll_loss")
    options = options if rule == "threshold" else {}
    saved = tmp_path / "v2"
    shutil.copytree(os.path.join(VERSION_2, f"tiny-{rule}"), saved)
    checkpoint = torch.load(saved / "checkpoint_last.pt", weights_only=True)
    assert scheduler_state(checkpoint)["version"] == 2 and "halvings" in scheduler_state(checkpoint)
    best = torch.load(saved / "checkpoint_best.pt", weights_only=True)
    trained = {fairseq_compat.checkpoint_position(best)["epoch"]: best["model"]}
    trained[len(losses)] = checkpoint["model"]
    torch.manual_seed(0)  # as make.py built its model
    live, model = build(**options)
    for epoch, loss in enumerate(losses, 1):
        fairseq_epoch(live, model, epoch, loss, tmp_path, trained.get(epoch))
    resumed, resumed_model, _ = resume(checkpoint, saved, **options)
    for epoch, loss in enumerate([None] + later, len(losses)):
        if loss is not None:
            fairseq_epoch(live, model, epoch, loss, tmp_path)
            fairseq_epoch(resumed, resumed_model, epoch, loss, saved)
        assert (resumed.optimizer.get_lr(), resumed.halvings, resumed.best_epoch) == (
            live.optimizer.get_lr(),
            live.halvings,
            live.best_epoch,
        ), epoch
        assert same(params(resumed_model), params(model)), epoch
    assert live.halvings >= 2  # the continuation halved and restored


def test_resume_from_a_mid_epoch_checkpoint_replays_nothing(caplog, tmp_path):
    live, model = build()
    fairseq_epoch(live, model, 1, 5.0, tmp_path)
    fairseq_epoch(live, model, 2, 6.0, tmp_path)
    live.step_begin_epoch(3)
    train_a_bit(live, model, 3)  # saved inside epoch 3 after a validation that did not improve
    checkpoint = fairseq_save(live, model, 5.5, tmp_path, 3, iterations=1)
    with caplog.at_level(logging.WARNING):
        resumed, resumed_model, trainer = resume(checkpoint, tmp_path)  # inside epoch 3
        trainer.lr_step_begin_epoch(3)
    assert caplog.text == ""
    assert (resumed.optimizer.get_lr(), resumed.halvings) == (0.5, 1)
    assert same(params(resumed_model), params(model))
    assert same(resumed.best_params, live.best_params)


def test_resume_without_fairseq_best_replays_from_the_value_saved_with_the_checkpoint(
    caplog, tmp_path
):
    """--reset-meters: fairseq never restores its running best; the epoch's own validation value
    is in the checkpoint (extra_state["val_loss"]), and the decision is replayed from it."""
    live, model = build()
    for epoch, loss in enumerate([5.0, 6.0], 1):
        checkpoint = fairseq_epoch(live, model, epoch, loss, tmp_path)
    del_fairseq_best()
    resumed, resumed_model, trainer = loaded(checkpoint, tmp_path)
    with caplog.at_level(logging.INFO):
        trainer.load_checkpoint(checkpoint)
        trainer.lr_step(3)
        trainer.lr_step_begin_epoch(3)
    assert "replaying it from the validation value saved with it, 6" in caplog.text
    assert resumed.optimizer.get_lr() == live.optimizer.get_lr() == 0.5
    assert resumed.halvings == live.halvings == 1
    assert same(params(resumed_model), params(model))  # epoch 1's, from checkpoint_best.pt
    assert same(resumed.best_params, live.best_params)


def tensors_in(obj):
    if torch.is_tensor(obj):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in tensors_in(x)]
    return []


def test_checkpoints_hold_no_copy_of_the_parameters(tmp_path):
    live, model = build()
    for epoch, loss in enumerate([5.0, 4.0, 4.5, 3.0], 1):
        checkpoint = fairseq_epoch(live, model, epoch, loss, tmp_path)
        assert live.best_params is not None or epoch == 1
        assert tensors_in(scheduler_state(checkpoint)) == []


@pytest.mark.parametrize(
    "flags", [dict(save_interval_updates=10), dict(save_interval=2)], ids=["updates", "epochs"]
)
def test_checkpoints_keep_the_copy_when_checkpoint_best_may_miss_the_best_epoch(flags, tmp_path):
    """Mid-epoch saves (--save-interval-updates) may put parameters from inside an epoch in
    checkpoint_best.pt, --save-interval 2 skips saving some epochs: the copy stays in the state."""
    live, model = build(**flags)
    for epoch, loss in enumerate([5.0, 4.0, 4.5], 1):
        checkpoint = fairseq_epoch(live, model, epoch, loss)  # and no checkpoint_best.pt at all
    assert same(scheduler_state(checkpoint)["best_params"], live.best_params)
    resumed, resumed_model, _ = resume(checkpoint, tmp_path)
    assert resumed.halvings == 1 and same(params(resumed_model), params(model))


def foreign_checkpoint_best(kind, tmp_path):
    """Puts in tmp_path a checkpoint_best.pt that is not the best epoch of the run resumed."""
    path = tmp_path / "checkpoint_best.pt"
    if kind == "missing":
        path.unlink()
        return "is missing"
    if kind == "another run":  # same model, saved at another point with another value
        other, other_model = build()
        for epoch, loss in enumerate([5.0, 4.0, 3.9], 1):
            fairseq_epoch(other, other_model, epoch, loss)
        del_fairseq_best()
        fairseq_save(other, other_model, 3.5, tmp_path, 4)
        return r"holds the end of epoch 3 \(valid 3.5\)"
    state = torch.load(path, weights_only=True)  # another model: one tensor of another shape
    state["model"]["a.weight"] = torch.zeros(5, 3)
    torch.save(state, path)
    return r"does not match the model \(a.weight is \[5, 3\], the model's \[4, 3\]\)"


@pytest.mark.parametrize("kind", ["missing", "another run", "another model"])
def test_resume_refuses_a_checkpoint_best_that_lacks_the_best_epoch(kind, tmp_path):
    live, model = build()
    for epoch, loss in enumerate([5.0, 4.0, 4.5], 1):  # resuming restores epoch 2
        checkpoint = fairseq_epoch(live, model, epoch, loss, tmp_path)
    problem = foreign_checkpoint_best(kind, tmp_path)
    with pytest.raises(NoisingError) as refused:
        resume(checkpoint, tmp_path)
    message = refused.value.message
    assert "\n" not in message
    path = tmp_path / "checkpoint_best.pt"
    assert message.startswith(f"--lr-scheduler paper_halving: {path} "), message
    assert re.search(problem, message), message
    assert "best epoch 2 (valid loss 4, 2 updates)" in message
    assert "pass --reset-lr-scheduler to start the protocol afresh" in message


@pytest.mark.parametrize(
    "restore_file, suffix, continue_once, last_exists",
    [
        ("checkpoint_last.pt", "", None, True),
        ("checkpoint_last.pt", "-x", None, True),
        ("checkpoint_last.pt", "", "pretrained.pt", False),  # a first launch: continue_once
        ("checkpoint_last.pt", "-x", "pretrained.pt", True),
        ("elsewhere/checkpoint5.pt", "-x", None, False),
    ],
)
def test_checkpoint_files_name_the_file_that_fairseq_resumes_from(
    restore_file, suffix, continue_once, last_exists, tmp_path
):
    """fairseq_compat.checkpoint_files against checkpoint_utils.load_checkpoint, whose rule is
    inline: the path it hands Trainer.load_checkpoint."""
    cfg = CheckpointConfig(
        save_dir=str(tmp_path),
        restore_file=restore_file,
        continue_once=continue_once,
        checkpoint_suffix=suffix,
    )
    if last_exists:
        (tmp_path / f"checkpoint_last{suffix}.pt").touch()
    opened = []
    trainer = SimpleNamespace(
        checkpoint_suffix=suffix,
        load_checkpoint=lambda path, *args, **kwargs: opened.append(path),
        get_train_iterator=lambda epoch, **kwargs: SimpleNamespace(epoch=epoch),
        lr_step=lambda epoch: None,
    )
    checkpoint_utils.load_checkpoint(cfg, trainer)
    assert fairseq_compat.checkpoint_files(cfg, DistributedTrainingConfig()) == (
        opened[0],
        str(tmp_path / f"checkpoint_best{suffix}.pt"),
    )


@pytest.mark.parametrize(
    "ddp_backend, use_sharded_state",
    [
        ("pytorch_ddp", False),
        ("pytorch_ddp", True),
        ("fully_sharded", False),
        ("fully_sharded", True),
    ],
)
def test_sharded_checkpoints_are_refused_in_one_line_where_fairseq_shards_the_file(
    ddp_backend, use_sharded_state, tmp_path
):
    """Trainer.checkpoint_suffix (fairseq's) puts a shard into the file name exactly where the
    scheduler refuses the command line, before training, naming the flag."""
    from fairseq.trainer import Trainer

    flags = dict(ddp_backend=ddp_backend, use_sharded_state=use_sharded_state)
    cfg = SimpleNamespace(
        checkpoint=CheckpointConfig(save_dir=str(tmp_path)),
        distributed_training=DistributedTrainingConfig(**flags),
    )
    trainer = SimpleNamespace(cfg=cfg, data_parallel_rank=0)
    trainer.is_fsdp = Trainer.is_fsdp.fget(trainer)
    shard = Trainer.checkpoint_suffix.fget(trainer)
    if shard == "":
        scheduler, _ = build(save_dir=str(tmp_path), **flags)
        files = fairseq_compat.checkpoint_files(cfg.checkpoint, cfg.distributed_training)
        assert files[0] == str(tmp_path / "checkpoint_last.pt")
        return
    assert shard == "-shard0"
    with pytest.raises(NoisingError) as refused:
        build(save_dir=str(tmp_path), **flags)
    assert str(refused.value) == (
        "fairseq-noising: error: --lr-scheduler paper_halving: --use-sharded-state writes one "
        "checkpoint per rank (checkpoint_last-shard<rank>.pt); expected one whole checkpoint: "
        "drop --use-sharded-state"
    )


def test_resume_from_another_file_than_fairseqs_replays_nothing_and_reads_no_best(caplog, tmp_path):
    """The file that fairseq's rule names holds another point than the checkpoint loaded (a
    program that loads a path of its own): its validation is not replayed, and without it the
    best parameters cannot be read back."""
    live, model = build()
    for epoch, loss in enumerate([5.0, 4.0, 4.5], 1):
        checkpoint = fairseq_epoch(live, model, epoch, loss, tmp_path)
        if epoch == 2:
            epoch_2 = checkpoint
    scheduler, _, trainer = loaded(epoch_2, tmp_path, no_restore_best=True)  # at the rule's path
    with caplog.at_level(logging.WARNING):
        trainer.load_checkpoint(checkpoint)
    assert (
        f"{tmp_path / 'checkpoint_last.pt'} holds the end of epoch 2, not epoch 4 at 3 updates: "
        "it is not the checkpoint being loaded"
    ) in caplog.text
    assert (scheduler.halvings, scheduler.validations[-1]["epoch"]) == (0, 2)  # 3 not replayed
    scheduler, _, trainer = loaded(epoch_2, tmp_path)
    with pytest.raises(NoisingError, match="checkpoint_best.pt cannot be mapped onto the model "):
        trainer.load_checkpoint(checkpoint)


def test_resume_refuses_a_missing_checkpoint_best_even_when_nothing_restores_at_once(tmp_path):
    """Refused while loading, before any training: a later non-improving epoch would need it."""
    live, model = build()
    for epoch, loss in enumerate([5.0, 4.0], 1):
        fairseq_epoch(live, model, epoch, loss, tmp_path)
    live.step_begin_epoch(3)
    train_a_bit(live, model, 3)
    checkpoint = fairseq_save(live, model, 4.5, tmp_path, 3, iterations=1)  # inside epoch 3
    (tmp_path / "checkpoint_best.pt").unlink()
    with pytest.raises(NoisingError, match="checkpoint_best.pt is missing"):
        resume(checkpoint, tmp_path)


@pytest.mark.parametrize("inside", [3.5, 4.0, 4.2], ids=["better", "tie", "worse"])
def test_resume_inside_an_epoch_keeps_the_weights_those_of_checkpoint_best(inside, tmp_path):
    """--stop-time-hours / --max-update stop inside an epoch after a validation and a save,
    without an end-of-epoch decision. If that validation is not above the best, fairseq wrote
    checkpoint_best.pt there: the resumed scheduler takes that point as the best, so that a
    non-improving epoch restores what checkpoint_best.pt holds (the tie rule's invariant)."""
    live, model = build()
    for epoch, loss in enumerate([5.0, 4.0], 1):
        fairseq_epoch(live, model, epoch, loss, tmp_path)
    epoch2 = torch.load(tmp_path / "checkpoint_best.pt", weights_only=True)["model"]
    live.step_begin_epoch(3)
    train_a_bit(live, model, 3)
    stopped = fairseq_save(live, model, inside, tmp_path, 3, iterations=1)

    resumed, resumed_model, trainer = resume(stopped, tmp_path)
    trainer.lr_step_begin_epoch(3)
    best_file = torch.load(tmp_path / "checkpoint_best.pt", weights_only=True)
    assert (best_file["extra_state"]["val_loss"] == inside) == (inside <= 4.0)
    assert (resumed.best, resumed.best_epoch) == (
        (min(inside, 4.0), 3) if inside <= 4.0 else (4.0, 2)
    )
    train_a_bit(resumed, resumed_model, 33)  # the rest of epoch 3
    fairseq_save(resumed, resumed_model, 4.1, tmp_path, 4)  # above the best: a halving
    trainer.lr_step(3, 4.1)
    assert resumed.optimizer.get_lr() == 0.5
    restored = resumed_model.state_dict()
    assert all(torch.equal(restored[k], best_file["model"][k]) for k in restored)
    if inside > 4.0:
        assert all(torch.equal(restored[k], epoch2[k]) for k in restored)


class Tied(torch.nn.Module):
    """Tied weights (two names in a state dict, one parameter) and a buffer of hidden.bias's
    shape."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.hidden = torch.nn.Linear(3, 3)
        self.out = torch.nn.Linear(3, 5)
        self.out.weight = self.embed.weight
        self.register_buffer("steps", torch.full((3,), 7.0))


def test_optimizer_values_find_each_parameter_by_its_value_in_the_checkpoint_loaded():
    """The values that a checkpoint's state dict holds for optimizer.params, each parameter
    found by the value it holds in the checkpoint that the model was loaded from (fairseq saves
    fp16 as fp32), against parameters set to known values: ties, buffers, fp16 master copies."""
    model = Tied()

    def saved(sign):  # fairseq's layout, the parameters set to +-1, +-2, ... first
        for i, p in enumerate(model.parameters()):
            torch.nn.init.constant_(p, sign * float(i + 1))
        return {"model": {k: v.clone() for k, v in model.state_dict().items()}, "criterion": None}

    wanted, loaded = saved(1), saved(-1)  # the best, then the one the model was loaded from
    assert list(wanted["model"]) == [  # a buffer first, the tied weight twice
        "steps",
        "embed.weight",
        "hidden.weight",
        "hidden.bias",
        "out.weight",
        "out.bias",
    ]
    expected = [torch.full_like(p, float(i + 1)) for i, p in enumerate(model.parameters())]

    optimizer = build_optimizer(Namespace(**SGD_ARGS), list(model.parameters()))
    assert same(fairseq_compat.optimizer_values(optimizer, loaded, wanted), expected)

    half = list(model.half().parameters())
    args = Namespace(**SGD_ARGS)
    common = SimpleNamespace(
        fp16_scale_window=100,
        fp16_init_scale=1,
        fp16_scale_tolerance=0.0,
        threshold_loss_scale=None,
        min_loss_scale=1e-4,
    )
    cfg = SimpleNamespace(optimizer=args, common=common)
    master = FP16Optimizer.build_fp32_params(args, half, flatten=False)
    fp16 = FP16Optimizer(cfg, half, build_optimizer(args, master), master)
    values = fairseq_compat.optimizer_values(fp16, loaded, wanted)
    assert same(values, expected) and values[0].dtype == torch.float32
    # the flat master copy of --fp16 on a GPU: one tensor per device, parameters back to back
    flat = {None: torch.nn.Parameter(torch.cat([p.detach().float().reshape(-1) for p in half]))}
    fp16 = FP16Optimizer(cfg, half, build_optimizer(args, [flat]), flat)
    (values,) = fairseq_compat.optimizer_values(fp16, loaded, wanted)
    assert torch.equal(values, torch.cat([e.reshape(-1) for e in expected]))

    other = {"model": {**loaded["model"], "out.bias": torch.zeros(5)}}  # not what was loaded
    with pytest.raises(ValueError, match="a parameter holds values that the checkpoint loaded"):
        fairseq_compat.optimizer_values(optimizer, other, wanted)

    # the buffer holds hidden.bias's values where the model was loaded from: it says nothing
    # if the two agree in the checkpoint read, else which is hidden.bias is unknown
    loaded["model"]["steps"] = loaded["model"]["hidden.bias"].clone()
    with pytest.raises(ValueError, match="steps and hidden.bias are equal in the checkpoint "):
        fairseq_compat.optimizer_values(optimizer, loaded, wanted)
    wanted["model"]["steps"] = wanted["model"]["hidden.bias"].clone()
    assert same(fairseq_compat.optimizer_values(optimizer, loaded, wanted), expected)

    wanted["model"]["hidden.bias"] = torch.zeros(4)
    with pytest.raises(ValueError, match=r"hidden.bias is \[4\], the model's \[3\]"):
        fairseq_compat.optimizer_values(optimizer, loaded, wanted)
    del wanted["model"]["hidden.bias"]
    with pytest.raises(ValueError, match="no model parameter hidden.bias"):
        fairseq_compat.optimizer_values(optimizer, loaded, wanted)


# ---------------------------------------------------------------------------- slow tier
PLANTED = {1: 5.0, 2: 4.0, 3: 4.5, 4: 4.2}  # epochs 3 and 4 restore epoch 2


@pytest.fixture
def planted(monkeypatch):
    """fairseq-train's validation returns PLANTED's value for the epoch (after validating)."""
    plant_validation(monkeypatch, lambda epoch_itr: PLANTED[epoch_itr.epoch])


def run(data, save, caplog, *extra):
    """fairseq-train at lr 1.0 (every epoch moves the weights), as a fresh process would, with
    KN noising: the stock language_modeling task makes its batches from the seed and the epoch
    that the process starts at, so that a resumed run would not train on the same batches."""
    task = "noised_language_modeling"
    argv = train_argv(data, save, *extra, task=task, scheme="kn", gamma=0.5, lr=1.0)
    del_fairseq_best()
    return train_in_process(argv, caplog)


def load(path):
    return checkpoint_utils.load_checkpoint_to_cpu(str(path))


def equal_models(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_fairseq_train_interrupted_and_resumed_follows_the_same_protocol(
    ptb_tiny_bin, tmp_path, caplog
):
    # --halvings 3 (epochs 1..5) keeps this short; the protocol is the same as with 8
    argv = train_argv(ptb_tiny_bin, tmp_path / "ckpt", "--halvings", 3)
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
@pytest.mark.slow
def test_fairseq_train_checkpoints_are_the_size_of_the_model(
    ptb_tiny_bin, tmp_path, caplog, planted
):
    save = tmp_path / "ckpt"
    run(ptb_tiny_bin, save, caplog, "--max-epoch", 3)  # epoch 3's save holds epoch 2 as the best
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        state = load(save / name)
        model_bytes = sum(t.numel() * t.element_size() for t in state["model"].values())
        assert state["last_optimizer_state"]["state"] == {}  # plain SGD: no optimizer state
        scheduler = state["optimizer_history"][-1]["lr_scheduler_state"]
        assert scheduler["best_params"] is None and tensors_in(scheduler) == []
        size = os.path.getsize(save / name)
        assert model_bytes < size < model_bytes + 40_000, (name, size, model_bytes)


@pytest.mark.slow
def test_fairseq_train_resumed_restores_checkpoint_best_as_an_uninterrupted_run(
    ptb_tiny_bin, tmp_path, caplog, planted
):
    """Interrupted after epoch 3 (its checkpoint is saved before epoch 3's decision), resumed:
    the replayed decision restores epoch 2 from checkpoint_best.pt, and epoch 4 (trained from
    it) ends bit-identical to the uninterrupted run's epoch 4."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    log = run(ptb_tiny_bin, whole, caplog, "--max-epoch", 4)
    assert decisions(log) == [("1", "", ""), ("2", "", ""), ("3", "1", ""), ("4", "2", "")]
    assert log.count("restored the parameters of epoch 2") == 2

    run(ptb_tiny_bin, parts, caplog, "--max-epoch", 3)
    interrupted = tmp_path / "interrupted"
    shutil.copytree(parts, interrupted)
    log = run(ptb_tiny_bin, parts, caplog, "--max-epoch", 4)
    assert "replaying it from the validation value saved with it, 4.5" in log
    assert decisions(log) == [("3", "1", ""), ("4", "2", "")]
    assert log.count("restored the parameters of epoch 2") == 2
    assert "begin training epoch 3" not in log
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        assert equal_models(load(whole / name)["model"], load(parts / name)["model"]), name
    assert not equal_models(
        load(parts / "checkpoint_last.pt")["model"], load(parts / "checkpoint_best.pt")["model"]
    )

    # the same from the checkpoints of the previous version of the scheduler (state version 2),
    # written on a machine that may round differently (another CPU's kernels): the run to match
    # resumes from this version's checkpoints of the interruption holding that machine's models
    old, this = tmp_path / "version-2", tmp_path / "version-3"
    shutil.copytree(os.path.join(VERSION_2, "fairseq-train"), old)
    shutil.copytree(interrupted, this)
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        state = torch.load(this / name, weights_only=True)
        torch.save(
            {**state, "model": torch.load(old / name, weights_only=True)["model"]}, this / name
        )
    log = run(ptb_tiny_bin, this, caplog, "--max-epoch", 4)
    assert decisions(log) == [("3", "1", ""), ("4", "2", "")]
    assert load(old / "checkpoint_last.pt")["optimizer_history"][-1]["lr_scheduler_state"] == {
        **load(old / "checkpoint_last.pt")["optimizer_history"][-1]["lr_scheduler_state"],
        "version": 2,
        "halvings": 0,
        "best_epoch": 2,
    }
    log = run(ptb_tiny_bin, old, caplog, "--max-epoch", 4)
    assert "replaying it from the validation value saved with it, 4.5" in log
    assert decisions(log) == [("3", "1", ""), ("4", "2", "")]
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        assert equal_models(load(this / name)["model"], load(old / name)["model"]), name

    # the same resume without checkpoint_best.pt, or with another point's, stops before training
    for kind in ("missing", "another point"):
        target = interrupted / "checkpoint_best.pt"
        if kind == "missing":
            target.unlink()
            problem = "is missing"
        else:
            shutil.copy(interrupted / "checkpoint_last.pt", target)  # epoch 3's
            problem = "holds the end of epoch 3 (valid 4.5)"
        with pytest.raises(NoisingError) as refused:
            run(ptb_tiny_bin, interrupted, caplog, "--max-epoch", 4)
        assert refused.value.message.startswith(
            f"--lr-scheduler paper_halving: {target} {problem}, but resuming needs the "
            "parameters of the best epoch 2 (valid loss 4, "
        ), refused.value.message
        assert "begin training epoch" not in caplog.text


@pytest.mark.slow
def test_fairseq_train_resumed_inside_an_epoch_restores_what_checkpoint_best_holds(
    ptb_tiny_bin, tmp_path, caplog, monkeypatch
):
    """--max-update stops inside epoch 3 the way --stop-time-hours does: a validation (planted
    3.5, below the best 4.0), checkpoint_best.pt written there, no decision. Resumed, epoch 3
    ends at 3.8: not below 3.5, so the rate halves and the parameters go back to exactly those
    that checkpoint_best.pt holds (those of update 25)."""
    from fairseq.trainer import Trainer

    planted = {(1, True): 5.0, (2, True): 4.0, (3, False): 3.5, (3, True): 3.8}
    plant_validation(monkeypatch, lambda itr: planted[itr.epoch, itr.end_of_epoch()])
    real_lr_step, after_decision = Trainer.lr_step, {}

    def recording_lr_step(self, epoch, val_loss=None):
        lr = real_lr_step(self, epoch, val_loss)
        if val_loss is not None:
            after_decision[epoch] = {k: v.clone() for k, v in self.get_model().state_dict().items()}
        return lr

    monkeypatch.setattr(Trainer, "lr_step", recording_lr_step)
    save = tmp_path / "ckpt"
    log = run(ptb_tiny_bin, save, caplog, "--max-update", 25)
    assert "begin training epoch 3" in log and "begin training epoch 4" not in log
    best = load(save / "checkpoint_best.pt")
    assert best["extra_state"]["val_loss"] == 3.5
    assert best["optimizer_history"][-1]["num_updates"] == 25

    log = run(ptb_tiny_bin, save, caplog, "--max-epoch", 3)
    assert "paper_halving: resuming at update 25 inside epoch 3, where " in log
    assert "it becomes the best" in log
    assert "epoch 3: valid loss 3.8 does not improve on 3.5 (epoch 3); halving 1/8" in log
    assert "restored the parameters of epoch 3" in log
    assert not equal_models(load(save / "checkpoint_last.pt")["model"], best["model"])
    assert equal_models(after_decision[3], best["model"])
