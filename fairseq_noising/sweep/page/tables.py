"""What a results page says about its table: its title, a note, the paper's figures beside ours,
and on which data those figures were obtained.

They live with the table's config, under ``hydra.callbacks.row.table`` (``recipes/config``); the
options and when they are shown: docs/sweeps.md, "The page".
"""

import os
import warnings
from typing import Dict, List, Optional

from ...errors import NoisingError


def from_config(name: str, config_dir: str) -> Dict:
    """The table of the config ``name`` in ``config_dir`` (Hydra's composition, so that a table
    given by a config group counts); a NoisingError for a folder that is gone (a sweep's worktree
    removed since) or a name that is no config there."""
    if not os.path.isdir(config_dir):
        raise NoisingError(
            f"--table {name}: the config folder {config_dir} does not exist; "
            "pass the one that holds the table's config with --config-dir"
        )
    path = os.path.join(config_dir, f"{name}.yaml")
    if not os.path.isfile(path):
        known = sorted(f[:-5] for f in os.listdir(config_dir) if f.endswith(".yaml"))
        raise NoisingError(
            f"--table {name}: no {name}.yaml in {config_dir} (tables: {', '.join(known)})"
        )
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import Hydra14MigrationWarning
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    # version_base 1.1, as fairseq-hydra-train composes: Hydra keeps the version base for the
    # process, and a later one makes fairseq's own hydra.experimental.initialize raise; Hydra's
    # warning that 1.4 will drop that base is fairseq's to heed, not the page writer's user's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Hydra14MigrationWarning)
        with initialize_config_dir(config_dir=os.path.abspath(config_dir), version_base="1.1"):
            cfg = compose(config_name=name, return_hydra_config=True)
    row = OmegaConf.to_container(cfg.hydra.callbacks.get("row") or {}, resolve=False)
    return spec(row.get("table"), name)


def spec(table, name: str) -> Dict:
    """A table's options as a plain dict with every key (an earlier version named its table
    by a string: it is a title without figures)."""
    if not isinstance(table, dict):
        table = {"title": name if table is None else f"{name} ({table})"}
    paper = {str(k): list(v) for k, v in (table.get("paper") or {}).items()}
    return {
        "title": table.get("title") or name,
        "note": table.get("note") or "",
        "data": dict(table.get("data") or {}),
        "paper": paper,
        "plateau_ppl": table.get("plateau_ppl"),  # translation: halvings that began above it
    }


def train_sentences(cfg: Dict, cwd: str) -> Optional[int]:
    """The number of training sentences (lines) of a row's binarized data, from fairseq's index
    (``train.idx``, or ``train.SRC-TGT.SRC.idx`` for translation); None if it cannot be read."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    task = cfg.get("task") or {}
    data = str(task.get("data", ""))
    data = data if os.path.isabs(data) else os.path.join(cwd, data)
    data = data.split(os.pathsep)[0]
    prefix = "train"
    if task.get("source_lang"):
        src, tgt = task["source_lang"], task.get("target_lang")
        prefix = f"train.{src}-{tgt}.{src}"
    index = os.path.join(data, prefix + ".idx")
    if not os.path.isfile(index):
        return None
    try:
        return len(MMapIndexedDataset.Index(index))
    except Exception:  # not an mmap index
        return None


def on_its_data(table: Dict, rows: List[Dict]) -> bool:
    """Whether every row trained on the data the table is about (its ``data.train_sentences``
    training sentences); True for a table that names no such number."""
    want = table["data"].get("train_sentences")
    if not want:
        return True
    return bool(rows) and all(train_sentences(r["config"], r["cwd"]) == int(want) for r in rows)
