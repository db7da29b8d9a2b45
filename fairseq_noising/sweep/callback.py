"""The Hydra callback that makes every row of a ``fairseq-hydra-train -m`` sweep a results row.

Named in a sweep's config as ``hydra.callbacks.row`` (``recipes/config``); what it does in the
process that trains a row, from the start to the page: docs/sweeps.md, "One row".
"""

import functools
import logging
import os
import subprocess
import sys
from contextlib import ExitStack
from typing import Any, Dict, List, Optional

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from . import events, page, progress, record
from .page import markdown

logger = logging.getLogger(__name__)


def one_line(e: BaseException, config: Optional[DictConfig] = None) -> str:
    """An exception in one line that names what was wrong, as the row's config names it:
    omegaconf's errors name the field (``full_key``, put first with its group); the plugin's
    (``fairseq-noising: error: --noise-gamma ...``) name a flag, which becomes its field
    (``task.noise_gamma``) where the word is the flag alone; other words stay as they are."""
    from ..errors import error_line

    ours = error_line(e)
    if ours is not None:
        words = [_field(w, config) if w.startswith("--") else w for w in ours.split(" ")]
        return " ".join(words)
    lines = [s.strip() for s in str(e).strip().splitlines() if s.strip()] or [type(e).__name__]
    key, text = getattr(e, "full_key", None), lines[0]
    if key and "." not in key and config is not None:
        key = _field(key, config)
    if key and key not in text:
        text = f"{key}: {text}"
    return f"{type(e).__name__}: {text}"


def _field(word: str, config: Optional[DictConfig]) -> str:
    """``--noise-gamma`` or ``noise_gamma`` as the config's field ``task.noise_gamma`` when
    exactly one group of ``config`` has it; the word as it is otherwise."""
    name = word.removeprefix("--").replace("-", "_") if word.startswith("--") else word
    if config is None or not name.isidentifier():
        return word
    groups = [g for g, sub in config.items() if isinstance(sub, DictConfig) and name in sub]
    return f"{groups[0]}.{name}" if len(groups) == 1 else word


class RowCallback(Callback):
    def __init__(self, page: Optional[str] = None, title: Optional[str] = None, **options: Any):
        # options: table (title, note, paper figures), beam, reference, tok_reference,
        # tokenizer, lowercase, generate_args: read back from .hydra/hydra.yaml by the page and
        # the evaluation
        self.page, self.title, self.options = page, title, options
        self._job = ExitStack()  # what this process's row changed of fairseq, undone at its end
        self._ended = False  # the row had ended before this job: nothing to train or record

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from ..errors import PREFIX

        raise SystemExit(
            f"{PREFIX}the tables' configs run every row as a sweep job, which records, evaluates "
            "and pages it: add -m (fairseq-hydra-train -m ...), for one row as well"
        )

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from ..errors import PREFIX

        translation = str(config.task.get("_name", "")).endswith("translation")
        if translation and not self.options.get("reference"):
            raise SystemExit(
                f"{PREFIX}hydra.callbacks.row.reference is not set: the rows' BLEU needs the raw "
                "test references (recipes/multi30k.sh sets it: WORK/raw/test.de)"
            )
        line = unknown_task_field(config)
        if line:
            raise SystemExit(line)  # before any row trains: Hydra's own error would advise +task=
        lines = bad_row_values(config)
        if lines:
            raise SystemExit("\n".join(lines))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from .. import fairseq_compat
        from ..fairseq_compat import training

        fairseq_compat.forget_best_validation_value()  # this process may have trained a row
        run_dir = config.hydra.runtime.output_dir
        self._ended = _has_ended(run_dir)
        if self._ended:
            logger.info(f"row {_name(run_dir)}: {self._ended}: nothing to train")
            self._job.enter_context(training.no_training())
            return
        _warn_inside_epochs(config)
        try:
            os.makedirs(run_dir, exist_ok=True)
            rec = {"format": record.FORMAT, "status": "training", "started": record.now()}
            rec.update(process=record.this_process(), gpu=_gpu(), mps=_mps())
            earlier = record.read_record(run_dir) or {}
            if "evaluation" in earlier:  # a rerun: reused if the checkpoint does not change
                rec["evaluation"] = earlier["evaluation"]
            record.write(run_dir, rec)
            saved = progress.checkpoint(run_dir)
            at = {k: saved[k] for k in ("epoch", "updates", "inside", "where")} if saved else None
            events.append(run_dir, {"tag": "start", "from": at})
        except Exception as e:  # a record is no reason not to train
            logger.warning(f"could not write the row's record: {e}")
        write = functools.partial(_append_quietly, run_dir)
        self._job.enter_context(training.recorded_progress(write))

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        self._job.close()
        run_dir = config.hydra.runtime.output_dir
        try:
            if not self._ended:
                status = "completed" if job_return.status == JobStatus.COMPLETED else "failed"
                _append_quietly(run_dir, {"tag": "end", "status": status})
                self._record_ending(run_dir, job_return, config)
            elif not (record.read_record(run_dir) or {}).get("evaluation"):
                self._record_evaluation(run_dir, record.read_record(run_dir) or {})
        except Exception as e:  # a broken record stops no other row
            logger.warning(f"could not record the row's ending: {e}")
        self._write_page(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = self._write_page(config)
        if path:
            print(f"results page: {path}")

    def _record_ending(self, run_dir: str, job_return: JobReturn, config: DictConfig) -> None:
        rec = record.read_record(run_dir) or {"format": record.FORMAT}
        rec["ended"] = record.now()
        if job_return.status != JobStatus.COMPLETED:
            rec.update(status="failed", error=one_line(job_return._return_value, config))
            record.write(run_dir, rec)
            logger.error(f"row {_name(run_dir)}: failed: {rec['error']}")
            # what Hydra raises once the rows have run: the summary line, not a traceback
            job_return.return_value = SystemExit(FailedRows(config.hydra.sweep.dir, self.page))
            return
        rec.update(status="ended", at_end=record.at_end(run_dir))
        rec.pop("error", None)
        record.write(run_dir, rec)
        self._record_evaluation(run_dir, rec)

    def _record_evaluation(self, run_dir: str, rec: Dict) -> None:
        """Evaluates the row in a process of its own (its output in ``eval.log``), which
        records its figures, or why it failed, in the row's record."""
        with open(os.path.join(run_dir, "eval.log"), "w", encoding="utf-8") as f:
            done = subprocess.run(
                [sys.executable, "-m", "fairseq_noising.sweep.evaluate", run_dir],
                stdout=f,
                stderr=subprocess.STDOUT,
            )
        rec = record.read_record(run_dir) or rec
        if done.returncode != 0:
            error = rec.get("evaluation_error") or f"exit status {done.returncode} (eval.log)"
            rec.update(status="failed", error=f"evaluation: {error}")
            record.write(run_dir, rec)
            logger.error(f"row {_name(run_dir)}: failed: {rec['error']}")
            return
        row = record.read(run_dir)
        logger.info(f"row {_name(run_dir)}: {markdown.ending_words(row) if row else 'ended'}")

    def _write_page(self, config: DictConfig) -> Optional[str]:
        try:
            return page.write(config.hydra.sweep.dir, self.page, title=self.title, by_row=True)
        except Exception as e:  # the page is rewritten by the next row, or by hand
            logger.warning(f"could not write the results page: {type(e).__name__}: {e}")
            return None


def _gpu() -> Optional[str]:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def _mps() -> bool:
    """Whether the row's CUDA work goes through an MPS daemon (recipes/mps.py, or any other:
    CUDA finds one through this variable)."""
    return bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY"))


def unknown_task_field(config: DictConfig) -> Optional[str]:
    """The line for the first row override (``task={...}`` or ``task.FIELD=...``, on the
    command line or in the config's rows) that names a field the task does not have; None."""
    from fairseq.tasks import TASK_DATACLASS_REGISTRY
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from .. import tasks  # noqa: F401  (the plugin's tasks, registered)
    from ..errors import PREFIX

    dataclass = TASK_DATACLASS_REGISTRY.get(str(config.task.get("_name")))
    if dataclass is None:
        return None
    fields = set(dataclass.__dataclass_fields__) | {"_name"}
    given = [str(o) for o in config.hydra.overrides.task]
    given += [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    for o in OverridesParser.create().parse_overrides(given):
        if o.is_delete() or not (o.key_or_group == "task" or o.key_or_group.startswith("task.")):
            continue
        values = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
        for value in values:
            keys = value if o.key_or_group == "task" and isinstance(value, dict) else {}
            names = list(keys) or [o.key_or_group[len("task.") :]] * (o.key_or_group != "task")
            for key in names:
                if key.split(".")[0] not in fields:
                    shown = ",".join(f"{k}:{v}" for k, v in keys.items()) if keys else ""
                    row = f"task={{{shown}}}" if o.key_or_group == "task" else o.input_line
                    known = ", ".join(sorted(fields - {"_name"}))
                    return f"{PREFIX}row {row}: the task has no field {key!r} (its fields: {known})"
    return None


def bad_row_values(config: DictConfig) -> List[str]:
    """One line per row (a job of the sweep, as Hydra's sweeper makes them) whose task values
    the task refuses before reading any file: a choice it does not offer (``noise_scheme:bogus``),
    a value out of range (``noise_gamma:1.5``, a negative subword alpha), naming the row, the
    field, the value and what is allowed."""
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from .. import tasks  # noqa: F401  (the plugin's tasks, registered)
    from ..errors import PREFIX, NoisingError

    name = str(config.task.get("_name"))
    dataclass, task = TASK_DATACLASS_REGISTRY.get(name), TASK_REGISTRY.get(name)
    if dataclass is None or not hasattr(task, "check_values"):
        return []
    parser = OverridesParser.create()
    # the config's rows first: a key the command line gives as well is the command line's
    given = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    given += [str(o) for o in config.hydra.overrides.task]
    base = OmegaConf.to_container(config.task, resolve=False)
    fields = OmegaConf.create({"task": dict.fromkeys(dataclass.__dataclass_fields__)})
    parsed = parser.parse_overrides(given)
    swept = {o.key_or_group for o in parsed if o.is_sweep_override()}  # what names a row
    lines = []
    for job in BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]:
        overrides = parser.parse_overrides(job)
        ours = [
            o for o in overrides if o.key_or_group.split(".")[0] == "task" and not o.is_delete()
        ]
        values = dict(base)
        for o in ours:
            if o.key_or_group == "task":
                values.update(o.value())
            else:
                values[o.key_or_group[len("task.") :]] = o.value()
        named = [o for o in overrides if o.key_or_group in swept] or ours  # one row: its task's
        row = " ".join(o.input_line for o in named)
        try:
            task.check_values(OmegaConf.merge(OmegaConf.structured(dataclass), values))
        except NoisingError as e:  # a value out of range: its flag named as the row's field
            lines.append(f"{PREFIX}row {row}: {one_line(e, fields).removeprefix(PREFIX)}")
        except Exception as e:  # omegaconf's: a choice the field does not offer
            lines.append(f"{PREFIX}row {row}: {one_line(e, fields).split(': ', 1)[1]}")
    return lines


class FailedRows:
    """The line a sweep whose rows failed ends with (Hydra raises ``SystemExit(FailedRows)`` for
    the first failed row once every row of the batch has run, and Python prints this): read from
    the rows' records when printed, in the process that ran the sweep."""

    def __init__(self, sweep_dir: str, page_path: Optional[str]):
        self.sweep_dir, self.page_path = sweep_dir, page_path

    def __str__(self) -> str:
        from ..errors import PREFIX

        rows = record.read_sweep(self.sweep_dir)
        failed = [r for r in rows if r["status"] == "failed"]
        said = "; ".join(
            f"{r['name']} ({str(r.get('error')).removeprefix(PREFIX)})" for r in failed
        )
        where = self.page_path or os.path.join(self.sweep_dir, page.DEFAULT_NAME)
        return f"{PREFIX}{len(failed)} of {len(rows)} rows failed: {said}; every row: {where}"


def _name(run_dir: str) -> str:
    return os.path.basename(os.path.normpath(run_dir))


def _append_quietly(run_dir: str, event: Dict) -> None:
    try:
        events.append(run_dir, event)
    except OSError as e:  # a full disk: the training goes on, its record stops
        logger.warning(f"could not record the row's progress: {e}")


def _has_ended(run_dir: str) -> Optional[str]:
    """How the row's training ended, when it has (by what its files say under the config this
    job is given: a larger budget or update cap trains on); None otherwise."""
    try:
        row = record.read(run_dir)
    except Exception:  # a row that cannot be read trains
        return None
    if not row or row["status"] in ("unreadable",) or not row.get("training"):
        return None
    stop = row["training"]["stop"]
    return markdown.ending_words(dict(row, status="ended")) if stop else None


def _warn_inside_epochs(config: DictConfig) -> None:
    """Validations inside an epoch may write checkpoint_best.pt: the model the row evaluates is
    then not the best end-of-epoch model that the paper's protocol picks."""
    from omegaconf import OmegaConf

    every = OmegaConf.select(config, "checkpoint.save_interval_updates", default=0) or (
        OmegaConf.select(config, "dataset.validate_interval_updates", default=0)
    )
    if every:
        logger.warning(
            f"checkpoint.save_interval_updates / dataset.validate_interval_updates = {every}: "
            "validations inside epochs may choose checkpoint_best.pt, the model this row "
            "evaluates (the paper's protocol picks the best end-of-epoch model); its page says "
            "which validation chose it"
        )
