"""How the checkpoints in this folder were written: by ``--lr-scheduler paper_halving`` as of
commit 6478db5 (scheduler state version 2, the decisions' outcome rather than the validations),
for tests/test_paper_halving_resume.py's tests that resume from them. On that commit:

    pytest -s tests/data/paper_halving_v2/make.py

tiny-plateau, tiny-threshold: the fast tier's tiny model (tests/halving_kit.py) after epochs with
validation losses 5, 4, 4.5, 4.2 (plateau rule) and 5, 4, 3.99, 3.98 (--halving-threshold 0.01),
saved as fairseq saves, before the last epoch's decision. fairseq-train: the real fairseq-train on
the tiny PTB slice with the planted losses 5, 4, 4.5, stopped by --max-epoch 3.
"""

import shutil
from pathlib import Path

import pytest
import torch
from halving_kit import build
from test_paper_halving_resume import PLANTED, fairseq_epoch, planted, run  # noqa: F401

OUT = Path(__file__).parent


@pytest.mark.parametrize("rule", ["plateau", "threshold"])
def test_make_fake(rule, tmp_path):
    torch.manual_seed(0)
    overrides = (
        dict(halving_threshold=0.01, best_checkpoint_metric="nll_loss")
        if rule == "threshold"
        else {}
    )
    live, model = build(**overrides)
    losses = [5.0, 4.0, 4.5, 4.2] if rule == "plateau" else [5.0, 4.0, 3.99, 3.98]
    for epoch, loss in enumerate(losses, 1):
        checkpoint = fairseq_epoch(live, model, epoch, loss, tmp_path)
    out = OUT / f"tiny-{rule}"
    out.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, out / "checkpoint_last.pt")
    shutil.copy(tmp_path / "checkpoint_best.pt", out / "checkpoint_best.pt")
    print(rule, checkpoint["optimizer_history"][-1]["lr_scheduler_state"])


def test_make_real(ptb_tiny_bin, tmp_path, caplog, planted):  # noqa: F811
    save = tmp_path / "ckpt"
    log = run(ptb_tiny_bin, save, caplog, "--max-epoch", 3)
    out = OUT / "fairseq-train"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        shutil.copy(save / name, out / name)
    print([l for l in log.splitlines() if "paper_halving" in l])
