"""The Hydra callback that makes every row of a ``fairseq-hydra-train -m`` sweep a results row.

Named in a sweep's config (``recipes/config``)::

    hydra:
      callbacks:
        row:
          _target_: fairseq_noising.sweep.callback.RowCallback
          table: ptb-medium           # the paper's table beside ours (:mod:`.paper`)

When a row starts, it writes its record (``row.json``, :mod:`.record`: config, overrides, the
command that reruns it, status ``training``) into its run folder. When its training ends, it
evaluates ``checkpoint_best.pt`` (:mod:`.evaluate`; reused when the checkpoint has not changed
since the record's evaluation), records the figures and how the training ended, or the failure,
and rewrites the sweep's results page (:mod:`.page`). The callback runs where the row runs (a
joblib worker, a SLURM node), so every launcher gets the same records; nothing it does fails a row
that trained, and a row that failed leaves the others alone.
"""

import copy
import logging
import os
from typing import Any, Dict, Optional, Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from . import evaluate, page, record

logger = logging.getLogger(__name__)


class RowCallback(Callback):
    def __init__(
        self,
        table: Optional[str] = None,
        page: Optional[str] = None,
        beam: int = 5,
        reference: Optional[str] = None,
        tok_reference: Optional[str] = None,
        tokenizer: str = "moses",
        generate_args: Sequence[str] = (),
    ):
        self.table, self.page = table, page
        self.translation = dict(
            beam=beam,
            reference=reference,
            tok_reference=tok_reference,
            tokenizer=tokenizer,
            generate_args=list(generate_args),
        )

    # ------------------------------------------------------------------ Hydra's hooks
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            run_dir = config.hydra.runtime.output_dir
            os.makedirs(run_dir, exist_ok=True)
            rec, earlier = self._new_record(config, run_dir), record.read(run_dir) or {}
            if "evaluation" in earlier:  # a rerun: reused if the checkpoint does not change
                rec["evaluation"] = earlier["evaluation"]
            record.write(run_dir, rec)
        except Exception as e:  # a record is no reason not to train
            logger.warning(f"could not write the row's record: {e}")

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        try:
            self._record_ending(config, job_return)
        except Exception as e:  # a broken record stops no other row
            logger.warning(f"could not record the row's ending: {e}")
        self._write_page(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = self._write_page(config)
        if path:
            print(f"results page: {path}")

    # ------------------------------------------------------------------ helpers
    def _record_ending(self, config: DictConfig, job_return: JobReturn) -> None:
        run_dir = config.hydra.runtime.output_dir
        rec = record.read(run_dir) or self._new_record(config, run_dir)
        rec["training"] = record.training(run_dir, rec["config"])
        rec["ended"] = record.now()
        if job_return.status == JobStatus.COMPLETED:
            try:
                rec["evaluation"] = self._evaluation(rec, run_dir)
                rec["status"] = "ended"
            except Exception as e:
                rec["status"], rec["error"] = "failed", f"evaluation: {e}"
        else:
            error = str(job_return._return_value).strip().splitlines() or ["?"]
            rec["status"] = "failed"
            rec["error"] = f"{type(job_return._return_value).__name__}: {error[-1]}"
        record.write(run_dir, rec)
        logger.info(f"row {rec['key']} gamma_0 {rec['gamma']}: {record.ending(rec)}")

    def _new_record(self, config: DictConfig, run_dir: str) -> Dict:
        job = copy.deepcopy(config)
        with open_dict(job):
            del job["hydra"]
        cfg = OmegaConf.to_container(job, resolve=True, enum_to_str=True)
        hydra = config.hydra
        sources = [s.path for s in hydra.runtime.config_sources if s.provider == "command-line"]
        sources = [os.path.relpath(p, hydra.runtime.cwd) for p in sources]  # as typed, mostly
        overrides = [o for o in hydra.overrides.hydra if not o.startswith("hydra.mode=")]
        overrides += list(hydra.overrides.task)
        return {
            "format": record.FORMAT,
            "table": self.table,
            "config_name": hydra.job.config_name,
            "overrides": list(hydra.overrides.task),
            "command": record.command(
                sources[0] if sources else None, hydra.job.config_name, overrides
            ),
            "key": record.row_key(cfg["task"]),
            "gamma": float(cfg["task"].get("noise_gamma", 0.0)),
            "status": "training",
            "started": record.now(),
            "cpus": os.cpu_count(),  # of the machine the row runs on
            "training": record.training(run_dir, cfg),
            "config": cfg,
        }

    def _evaluation(self, rec: Dict, run_dir: str) -> Dict:
        cfg = rec["config"]
        checkpoint = os.path.join(cfg["checkpoint"]["save_dir"], "checkpoint_best.pt")
        if not os.path.isfile(checkpoint):
            raise FileNotFoundError(
                f"{checkpoint} is missing: the training saved no best checkpoint"
            )
        stamp = os.path.getmtime(checkpoint)
        if rec.get("evaluation", {}).get("checkpoint_mtime") == stamp:
            return rec["evaluation"]  # this checkpoint was evaluated already
        if cfg["task"]["_name"].endswith("translation"):
            figures = evaluate.translation(cfg, run_dir, checkpoint, self.translation)
        else:
            figures = evaluate.language_model(cfg, run_dir, checkpoint)
        figures["checkpoint_mtime"] = stamp
        return figures

    def _write_page(self, config: DictConfig) -> Optional[str]:
        try:
            return page.write(config.hydra.sweep.dir, self.page, self.table)
        except Exception as e:  # the page is rewritten by the next row, or by hand
            logger.warning(f"could not write the results page: {e}")
            return None
