"""``--lr-scheduler paper_halving`` in the real ``fairseq-train`` (slow tier), on the tiny PTB
slice of tests/conftest.py: the protocol to its end with the console script (its decisions and
learning rates read from the log, against the rates worked by hand), and, in-process with planted
validation losses, the weights a non-improving epoch restores against those of fairseq's own
``checkpoint_best.pt``. Resumed runs: tests/test_paper_halving_resume.py.
"""

import pytest
import torch
from conftest import CLI_ENV, run_cli
from fairseq import checkpoint_utils
from halving_kit import (
    EXPECTED_DECISIONS,
    EXPECTED_LRS,
    decisions,
    epoch_lrs,
    no_fairseq_best,  # noqa: F401  (autouse: no fairseq best leaks between tests)
    plant_validation,
    train_argv,
    train_in_process,
)

pytestmark = pytest.mark.slow  # fairseq-train on real data


def test_fairseq_train_trains_at_lr_over_256_then_stops(ptb_tiny_bin, tmp_path):
    save = tmp_path / "ckpt"
    proc = run_cli(
        ["fairseq-train", *train_argv(ptb_tiny_bin, save, "--max-epoch", 30)], env=CLI_ENV
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


def test_fairseq_train_decides_nothing_before_the_start_epoch(ptb_tiny_bin, tmp_path):
    """The forced plateau with --halvings 2 --halving-start-epoch 4: epochs 2 and 3 tie with
    epoch 1 but come before epoch 4 (lr stays); halvings after epochs 4 and 5; the stop after
    epoch 6."""
    save = tmp_path / "ckpt"
    argv = train_argv(ptb_tiny_bin, save, "--max-epoch", 30, "--halvings", 2)
    proc = run_cli(["fairseq-train", *argv, "--halving-start-epoch", 4], env=CLI_ENV)
    log = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert decisions(log) == [
        ("1", "", ""),
        ("2", "", ""),
        ("3", "", ""),
        ("4", "1", ""),
        ("5", "2", ""),
        ("6", "", "stop"),
    ]
    assert log.count("the rule decides from epoch 4 on (--halving-start-epoch)") == 2
    assert epoch_lrs(log) == pytest.approx(
        {1: 1e-9, 2: 1e-9, 3: 1e-9, 4: 1e-9, 5: 5e-10, 6: 2.5e-10}
    )


@pytest.mark.parametrize("second", [6.0, 5.0], ids=["worse", "tie"])
def test_fairseq_train_non_improving_epoch_restores_the_weights_of_checkpoint_best(
    second, ptb_tiny_bin, tmp_path, caplog, monkeypatch
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

    planted = {1: 5.0, 2: second}
    plant_validation(monkeypatch, lambda epoch_itr: planted[epoch_itr.epoch])

    def weights(trainer):
        return {k: v.detach().clone() for k, v in trainer.get_model().state_dict().items()}

    around_decision = {}
    real_lr_step = Trainer.lr_step

    def recording_lr_step(self, epoch, val_loss=None):
        before = weights(self)
        lr = real_lr_step(self, epoch, val_loss)
        around_decision[epoch] = (before, weights(self))
        return lr

    monkeypatch.setattr(Trainer, "lr_step", recording_lr_step)
    save = tmp_path / "ckpt"
    log = train_in_process(train_argv(ptb_tiny_bin, save, "--max-epoch", 2, lr=1.0), caplog)
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
