"""A sweep row's record: ``row.json`` in the row's run folder, written by the row itself
(:class:`.callback.RowCallback`) when it starts and when it ends, read by the page writer.

A record holds what the row is (its Hydra config name, overrides and resolved config, its key
``scheme[:side]`` and gamma_0), the command that reruns it, its ``status`` (``training``,
``ended``, ``failed``), how far its training got (from fairseq's log, :func:`training`) and its
evaluation. Nothing is recovered from command lines: the page reads these fields.
"""

import datetime
import json
import os
import shlex
from typing import Dict, List, Optional

from ..analysis import logs

RECORD = "row.json"
LOG = "hydra_train.log"  # what fairseq-hydra-train writes into the row's folder
FORMAT = 1


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def row_key(task: Dict) -> str:
    """``kn``, or ``kn:source`` / ``kn:target`` for a translation row noising one side."""
    scheme, side = str(task.get("noise_scheme", "none")), str(task.get("noise_side", "both"))
    return scheme if side == "both" else f"{scheme}:{side}"


def command(config_dir: Optional[str], config_name: str, overrides: List[str]) -> str:
    """The command that reruns (or resumes) the row."""
    words = ["fairseq-hydra-train", "-m"]
    if config_dir:
        words += ["--config-dir", config_dir]
    return shlex.join(words + ["--config-name", config_name, *overrides])


def training(run_dir: str, cfg: Dict) -> Dict:
    """How far the row's training got, from its log: epochs validated, fairseq's validation
    perplexity per epoch, halvings, learning rate, why it stopped, wall time, GPU."""
    path = os.path.join(run_dir, LOG)
    log = logs.read_log(path) if os.path.isfile(path) else logs.RunLog()
    halving = cfg.get("lr_scheduler", {}).get("_name") == "paper_halving"
    return {
        "epochs": len(log.valid_ppl),
        "epochs_done": round(log.epochs_done, 3),
        "valid_ppl": {str(e): p for e, p in sorted(log.valid_ppl.items())},
        "train_ppl": {str(e): p for e, p in sorted(log.train_ppl.items())},
        "halvings": (log.halving[0] if log.halving else log.halvings) if halving else None,
        "max_halvings": cfg.get("lr_scheduler", {}).get("halvings") if halving else None,
        "lr": log.current_lr,
        "stop": log.stop,
        "wall_seconds": log.wall_seconds,
        "gpu": log.gpu,
    }


def ending(record: Dict) -> str:
    """How the row's training ended, or where it is: ``protocol`` (the halvings, patience, or
    --max-epoch of a run without paper_halving), ``time`` (the time budget), ``max_update``,
    ``max_epoch`` (a cap that cut paper_halving short), ``failed``, ``training``."""
    if record["status"] in ("training", "failed"):
        return record["status"]
    stop, halving = record["training"]["stop"], record["training"]["halvings"] is not None
    if stop in ("halvings", "patience") or (stop is None and not halving):
        return "protocol"
    return stop or "max_epoch"


def where(record: Dict) -> str:
    """``epoch 3 (40% of it), lr 0.5, 1 of 8 halvings``: where the training is or stopped."""
    t = record["training"]
    done = t["epochs_done"]
    text = (
        f"epoch {int(done) + 1} ({done % 1:.0%} of it)" if done % 1 else f"after epoch {int(done)}"
    )
    if t["lr"] is not None:
        text += f", lr {t['lr']:g}"
    if t["halvings"] is not None:
        text += f", {t['halvings']} of {t['max_halvings']} halvings"
    return text


def write(run_dir: str, record: Dict) -> None:
    path = os.path.join(run_dir, RECORD)
    with open(path + ".part", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".part", path)


def read(run_dir: str) -> Optional[Dict]:
    try:
        with open(os.path.join(run_dir, RECORD), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if record.get("format") == FORMAT else None


def read_sweep(sweep_dir: str) -> List[Dict]:
    """The records of a sweep folder's rows (one folder down), those still training brought up to
    date from their logs."""
    records = []
    for name in sorted(os.listdir(sweep_dir)):
        run_dir = os.path.join(sweep_dir, name)
        record = read(run_dir) if os.path.isdir(run_dir) else None
        if record is not None:
            record["run_dir"] = run_dir
            if record["status"] == "training":
                record["training"] = training(run_dir, record["config"])
            records.append(record)
    return records
