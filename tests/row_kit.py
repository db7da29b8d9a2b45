"""A sweep row's folder built by hand, as Hydra, fairseq and the row callback write it
(tests/test_sweep_rows.py, tests/test_analyze.py): Hydra's three files, the row's progress file
(and fairseq's json log of the same records), checkpoint_last.pt, and a paper_halving run with 2
halvings worked out by hand.
"""

import json
import textwrap
from pathlib import Path

import torch

CWD = "/home/u/repo"  # the folder the sweep ran in, as Hydra recorded it


def write_row(
    run_dir: Path,
    *,
    scheduler="paper_halving",
    halvings=2,
    max_epoch=200,
    max_update=0,
    hours=0.0,
    patience=-1,
    log=(),
    saved=None,
    table=None,
    scheme="kn",
    gamma=0.2,
    progress=None,
    start_epoch=None,
):
    """A row's folder: Hydra's three files (with the interpolations a sweep's config has), its
    progress file and json log (``log``: (tag, record) pairs as fairseq's json log has them,
    after one start from scratch; ``progress``: the progress file's events instead) and, with
    ``saved``, a checkpoint_last.pt; ``start_epoch``: its ``--halving-start-epoch`` (unset: a
    config of before the flag)."""
    hydra_dir = run_dir / ".hydra"
    hydra_dir.mkdir(parents=True)
    (hydra_dir / "config.yaml").write_text(
        textwrap.dedent(
            f"""\
            task:
              _name: noised_language_modeling
              data: data-bin/ptb
              noise_scheme: {scheme}
              noise_gamma: {gamma}
            common:
              user_dir: ${{hydra:runtime.cwd}}/fairseq_noising
              seed: 2
              log_format: json
            checkpoint:
              save_dir: ${{hydra:runtime.output_dir}}
              best_checkpoint_metric: loss
              maximize_best_checkpoint_metric: false
              patience: {patience}
            optimization:
              lr: [1.0]
              max_epoch: {max_epoch}
              max_update: {max_update}
              stop_time_hours: {hours}
            lr_scheduler:
              _name: {scheduler}
              halvings: {halvings}
              halving_threshold: null
              lr_shrink: 0.5
            """
        )
        + (f"  halving_start_epoch: {start_epoch}\n" if start_epoch is not None else "")
    )
    hydra = {
        "hydra": {
            "run": {"dir": "outputs/${now:%Y-%m-%d}"},  # Hydra's own: never resolved here
            "runtime": {
                "cwd": CWD,
                "output_dir": str(run_dir),
                "config_sources": [
                    {"path": "pkg://hydra.conf", "schema": "pkg", "provider": "hydra"},
                    {"path": f"{CWD}/recipes/config", "schema": "file", "provider": "command-line"},
                ],
            },
            "job": {"config_name": "ptb_small"},
            "overrides": {
                "hydra": [f"hydra.sweep.dir={CWD}/runs/x", "hydra.mode=MULTIRUN"],
                "task": [
                    f"task={{noise_scheme:{scheme},noise_gamma:{gamma}}}",
                    f"task.data={CWD}/data-bin/ptb",
                ],
            },
            "callbacks": {"row": {"_target_": "x", "table": table}},
        }
    }
    (hydra_dir / "hydra.yaml").write_text(json.dumps(hydra))  # JSON is YAML
    overrides = hydra["hydra"]["overrides"]["task"]
    (hydra_dir / "overrides.yaml").write_text(json.dumps(overrides))
    lines = [f"[2026-11-26 05:39:16,536][{tag}][INFO] - {json.dumps(rec)}\n" for tag, rec in log]
    (run_dir / "hydra_train.log").write_text(
        "[x][fairseq_cli.train][INFO] - {'_name': None}\n" + "".join(lines)
    )
    if progress is None:
        progress = [{"tag": "start", "from": None}] + [as_event(tag, rec) for tag, rec in log]
    (run_dir / "progress.jsonl").write_text(
        "".join(json.dumps({"time": 1000.0 + 60 * i, **e}) + "\n" for i, e in enumerate(progress))
    )
    if saved is not None:
        torch.save(saved, run_dir / "checkpoint_last.pt")
    return run_dir


def as_event(tag, rec):
    """A json log's record as the progress file has it: fairseq's statistics by their own
    names (``loss``, not ``valid_loss``), as numbers."""
    prefix = "" if tag == "train_inner" else f"{tag}_"
    out = {"tag": tag}
    for key, value in rec.items():
        key = key.removeprefix(prefix) if key != "epoch" else key
        out["position" if tag == "train_inner" and key == "update" else key] = float(value)
    out["epoch"] = int(rec["epoch"])
    return out


def checkpoint(validations, epoch, inside=0, val_loss=None, updates=100, seconds=60.0):
    """What fairseq saves: the scheduler's state in the optimizer history, the epoch iterator's
    position (at the end of epoch e it names epoch e + 1), the last validation's value, the
    cumulative training time."""
    return {
        "model": {"w": torch.zeros(2)},
        "optimizer_history": [
            {
                "lr_scheduler_state": {
                    "version": 3,
                    "validations": validations,
                    "best_params": None,
                },
                "num_updates": updates,
            }
        ],
        "extra_state": {
            "train_iterator": {"epoch": epoch, "iterations_in_epoch": inside, "version": 2},
            "val_loss": val_loss,
            "previous_training_time": seconds,
        },
    }


def v(epoch, loss):
    return {"epoch": epoch, "loss": loss, "updates": 10 * epoch, "inside": False}


def valid(epoch, loss, ppl):
    return ("valid", {"epoch": epoch, "valid_loss": str(loss), "valid_ppl": str(ppl)})


def train(epoch, ppl, lr, updates, seconds=None):
    rec = {"epoch": epoch, "train_ppl": str(ppl), "train_lr": str(lr)}
    if seconds is not None:  # fairseq's epoch summary: train_wall, the epoch's training time
        rec["train_train_wall"] = str(seconds)
    return ("train", dict(rec, train_num_updates=str(updates)))


def inner(epoch, position, lr, updates):
    rec = {"epoch": epoch, "update": position, "lr": str(lr), "num_updates": str(updates)}
    return ("train_inner", rec)


# the plateau rule with 2 halvings, by hand: 5 first, 4 improves, 4.5 worse (halving 1),
# 4.2 worse (halving 2), then 4.3 worse: the third decision after the last halving ends it
HALVED = [v(1, 5.0), v(2, 4.0), v(3, 4.5), v(4, 4.2)]
LOG = [valid(1, 5.0, 32.0), train(1, 60.0, 1, 10), valid(2, 4.0, 16.0), train(2, 20.0, 1, 20)]
LOG += [valid(3, 4.5, 22.6), train(3, 18.0, 0.5, 30), valid(4, 4.2, 18.4), train(4, 17.0, 0.25, 40)]
LOG += [valid(5, 4.3, 19.7), train(5, 16.5, 0.25, 50)]
