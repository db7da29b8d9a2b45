"""The Hydra callback that makes every row of a ``fairseq-hydra-train -m`` sweep a results row.

Named in a sweep's config (``recipes/config``)::

    hydra:
      callbacks:
        row:
          _target_: fairseq_noising.sweep.callback.RowCallback
          table: {title: ..., paper: {...}}   # the page's title and the paper's figures

When a row starts, in the process that trains it (a joblib worker, a SLURM job), the callback
starts fairseq's running bests afresh (a process may have trained another row before) and
writes the row's record (``row.json``, :mod:`.record`: status ``training``, the process, the
GPU, whether an MPS daemon serves it). When the training ends it evaluates
``checkpoint_best.pt`` in a process of its own (:mod:`.evaluate`), records how the row ended (or
why it failed, in one line, also printed at once), with what the checkpoint says of the
training's end (for when the checkpoints are gone), and rewrites the sweep's results page
(:mod:`.page`). Nothing it does fails a row that trained, and a row that failed leaves the
others alone.
"""

import logging
import os
import subprocess
import sys
from typing import Any, Optional

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from . import page, record

logger = logging.getLogger(__name__)


def one_line(e: BaseException, config: Optional[DictConfig] = None) -> str:
    """An exception in one line that names what was wrong: omegaconf's errors name the field
    (``full_key``, inside its group: ``noise_scheme`` of ``task``) on a line of their own; it is
    put first, with its group."""
    lines = [s.strip() for s in str(e).strip().splitlines() if s.strip()] or [type(e).__name__]
    key, text = getattr(e, "full_key", None), lines[0]
    if key and "." not in key and config is not None:
        groups = [g for g, sub in config.items() if isinstance(sub, DictConfig) and key in sub]
        key = f"{groups[0]}.{key}" if len(groups) == 1 else key
    if key and key not in text:
        text = f"{key}: {text}"
    return f"{type(e).__name__}: {text}"


class RowCallback(Callback):
    def __init__(self, page: Optional[str] = None, **options: Any):
        # options: table (title, note, paper figures), title, beam, reference, tok_reference,
        # tokenizer, generate_args: read back from .hydra/hydra.yaml by the page and evaluation
        self.page = page

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from .. import fairseq_compat

        fairseq_compat.forget_best_validation_value()  # this process may have trained a row
        try:
            run_dir = config.hydra.runtime.output_dir
            os.makedirs(run_dir, exist_ok=True)
            rec = {"format": record.FORMAT, "status": "training", "started": record.now()}
            rec.update(process=record.this_process(), gpu=_gpu(), mps=_mps())
            earlier = record.read_record(run_dir) or {}
            if "evaluation" in earlier:  # a rerun: reused if the checkpoint does not change
                rec["evaluation"] = earlier["evaluation"]
            record.write(run_dir, rec)
        except Exception as e:  # a record is no reason not to train
            logger.warning(f"could not write the row's record: {e}")

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        run_dir = config.hydra.runtime.output_dir
        try:
            self._record_ending(run_dir, job_return, config)
        except Exception as e:  # a broken record stops no other row
            logger.warning(f"could not record the row's ending: {e}")
        self._write_page(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = self._write_page(config)
        if path:
            print(f"results page: {path}")

    def _record_ending(self, run_dir: str, job_return: JobReturn, config: DictConfig) -> None:
        rec = record.read_record(run_dir) or {"format": record.FORMAT}
        name = os.path.basename(os.path.normpath(run_dir))
        rec["ended"] = record.now()
        if job_return.status == JobStatus.COMPLETED:
            rec.update(status="ended", at_end=record.at_end(run_dir))
            rec.pop("error", None)
            record.write(run_dir, rec)
            error = _evaluate(run_dir)
            rec = record.read_record(run_dir) or rec
            if error:
                rec.update(status="failed", error=f"evaluation: {error}")
        else:
            rec.update(status="failed", error=one_line(job_return._return_value, config))
        record.write(run_dir, rec)
        if rec["status"] == "failed":
            logger.error(f"row {name}: failed: {rec['error']}")
            return
        row = record.read(run_dir)
        logger.info(f"row {name}: {page.how(row) if row else 'ended'}")

    def _write_page(self, config: DictConfig) -> Optional[str]:
        try:
            return page.write(config.hydra.sweep.dir, self.page)
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


def _evaluate(run_dir: str) -> Optional[str]:
    """Runs ``fairseq-noise-eval RUN_DIR`` in a process of its own (its output in the row's
    ``eval.log``); the error's line, or None."""
    log = os.path.join(run_dir, "eval.log")
    with open(log, "w", encoding="utf-8") as f:
        done = subprocess.run(
            [sys.executable, "-m", "fairseq_noising.sweep.evaluate", run_dir],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    if done.returncode == 0:
        return None
    with open(log, encoding="utf-8", errors="replace") as f:
        lines = [s for s in f.read().strip().splitlines() if s.strip()]
    return (lines or [f"exit {done.returncode}"])[-1].strip()
