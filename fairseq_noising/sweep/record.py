"""A sweep row: what it is, how far it got, how it ended, what it scored; read from its folder.

Each fact is read from the one file that holds it (docs/sweeps.md, "Where each fact is" and
"``row.json``"); :func:`read` puts them together into a plain dict, the page's input (:mod:`.page`).
"""

import datetime
import json
import os
import shlex
import socket
import subprocess
from typing import Dict, List, Optional

from . import progress

RECORD = "row.json"
FORMAT = 2


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def row_key(task: Dict) -> str:
    """``kn``, or ``kn:source`` / ``kn:target`` for a translation row noising one side; with
    subword sampling ``+sw<alpha>``, then ``/<nbest>`` and ``:<side>`` unless they are -1, both
    (``none+sw0.1/64``); trained in another precision than fp32, ``@<precision>`` last
    (``kn@bf16``)."""
    scheme, side = str(task.get("noise_scheme", "none")), str(task.get("noise_side", "both"))
    key = scheme if side == "both" else f"{scheme}:{side}"
    alpha = _float(task.get("subword_sampling_alpha"), 0.0)
    if alpha > 0:
        nbest, side = task.get("subword_sampling_nbest", -1), task.get("subword_sampling_side")
        key += f"+sw{alpha:g}" + (f"/{nbest}" if nbest not in (None, -1) else "")
        key += f":{side}" if side not in (None, "both") else ""
    return key + ("" if precision(task) == "fp32" else f"@{precision(task)}")


def precision(task: Dict) -> str:
    """The precision a row trained in (``task.precision``; fp32 for a row from before it)."""
    return str(task.get("precision") or "fp32")


# ---------------------------------------------------------------------------- row.json
def write(run_dir: str, record: Dict) -> None:
    path = os.path.join(run_dir, RECORD)
    part = f"{path}.{os.getpid()}.part"  # one writer's own temporary file
    with open(part, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    os.replace(part, path)


def read_record(run_dir: str) -> Optional[Dict]:
    """``row.json`` (format 2; an earlier format keeps its status and times, not its figures)."""
    try:
        with open(os.path.join(run_dir, RECORD), encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or "status" not in rec:
        return None
    if rec.get("format") != FORMAT:
        rec = {k: rec[k] for k in ("status", "started", "ended", "error", "cpus") if k in rec}
        rec["format"] = FORMAT
    return rec


def this_process() -> Dict:
    """Where the calling process runs: host, pid and its start time, SLURM job, cores and the
    CPU's model (None where the machine does not say)."""
    proc = {"host": socket.gethostname(), "pid": os.getpid(), "cpus": os.cpu_count()}
    proc["cpu"] = cpu_model()
    proc["pid_start"] = _start_time(os.getpid())
    if os.environ.get("SLURM_JOB_ID"):
        proc["slurm_job"] = os.environ["SLURM_JOB_ID"]
    return proc


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> Optional[str]:
    """The CPU's model name as Linux gives it (``model name`` in /proc/cpuinfo: x86), or None."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return None


def _start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (``/proc/PID/stat``, field 22), which
    tells a pid reused by another process apart; None where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def alive(proc: Optional[Dict]) -> Optional[bool]:
    """Whether the process (or SLURM job) that runs a row still runs; None if this machine
    cannot tell (another host, no squeue)."""
    if not proc:
        return None
    if proc.get("slurm_job"):
        try:
            out = subprocess.run(
                ["squeue", "-h", "-j", str(proc["slurm_job"]), "-o", "%T"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.returncode == 0 and bool(out.stdout.strip())
    if proc.get("host") != socket.gethostname():
        return None
    start = _start_time(int(proc["pid"]))
    if start is None:
        return False
    return proc.get("pid_start") in (None, start)


# ---------------------------------------------------------------------------- Hydra's files
def hydra_files(run_dir: str) -> Optional[Dict]:
    """The row's resolved config (less ``hydra``), its task overrides and Hydra's own config
    (``hydra.runtime.cwd``, the callbacks' options), from the ``.hydra`` folder Hydra wrote."""
    from omegaconf import OmegaConf

    folder = os.path.join(run_dir, ".hydra")
    try:
        with open(os.path.join(folder, "config.yaml"), encoding="utf-8") as f:
            # ${hydra:runtime.output_dir} reads Hydra's config of the running job; here it is the
            # hydra node that Hydra wrote beside it
            cfg = OmegaConf.create(f.read().replace("${hydra:", "${hydra."))
        hydra = OmegaConf.load(os.path.join(folder, "hydra.yaml"))
        overrides = OmegaConf.load(os.path.join(folder, "overrides.yaml"))
        both = OmegaConf.merge(cfg, hydra)
        config = {
            k: OmegaConf.to_container(both[k], resolve=True, enum_to_str=True)
            if OmegaConf.is_config(both[k])
            else both[k]
            for k in cfg
        }
    except Exception:  # missing, damaged, or an interpolation that no longer resolves
        return None
    return {
        "config": config,
        "overrides": [str(o) for o in overrides],
        "hydra": OmegaConf.to_container(hydra.hydra, resolve=False),
    }


def command(hydra: Dict, overrides: List[str], cwd: str) -> str:
    """The command that reruns (or resumes) the row, run from the sweep's folder ``cwd``."""
    words = ["fairseq-hydra-train", "-m"]
    for path in _config_dirs(hydra):
        words += ["--config-dir", relative(path, cwd)]
    words += ["--config-name", hydra["job"]["config_name"]]
    given = [o for o in hydra["overrides"]["hydra"] if not o.startswith("hydra.mode=")]
    for o in given + list(overrides):
        key, eq, value = o.partition("=")
        if eq and os.path.isabs(value):
            o = f"{key}={relative(value, cwd)}"
        words.append(o)
    return shlex.join(words)


def _config_dirs(hydra: Dict) -> List[str]:
    """The config folders given on the command line (``--config-dir``)."""
    sources = hydra["runtime"].get("config_sources") or []
    return [s["path"] for s in sources if s.get("provider") == "command-line"]


def relative(path: str, cwd: str) -> str:
    """``path`` as seen from ``cwd`` (the folder the sweep ran in), never absolute."""
    return os.path.relpath(path, cwd) if os.path.isabs(path) else path


# ---------------------------------------------------------------------------- the row
def read(run_dir: str) -> Optional[Dict]:
    """The row of a run folder (None: no row), for the page: ``name``, ``run_dir``, ``key``,
    ``precision``, ``gamma``, ``seed``, ``config``, ``command``, ``cwd``, ``table``, ``status``, ``training``
    (:func:`.progress.training`), ``evaluation``, ``error``, and ``where`` for a row that
    stopped. A folder whose files cannot be read is a row with status ``unreadable``."""
    rec = read_record(run_dir)
    files = hydra_files(run_dir)
    if rec is None and files is None:
        return None
    row = {"name": os.path.basename(os.path.normpath(run_dir)), "run_dir": run_dir}
    row.update(rec or {"status": "training"})
    if files is None:
        row.update(status="unreadable", error=f"{run_dir}/.hydra holds no readable config")
        return row
    cfg, hydra = files["config"], files["hydra"]
    cwd = hydra["runtime"]["cwd"]
    task = cfg.get("task") or {}
    sources = [s["path"] for s in hydra["runtime"].get("config_sources") or []]
    sources = [
        p
        for s, p in zip(hydra["runtime"]["config_sources"], sources)
        if s.get("provider") == "command-line"
    ]
    row.update(
        config=cfg,
        cwd=cwd,
        config_name=hydra["job"]["config_name"],
        config_dir=sources[0] if sources else None,
        key=row_key(task),
        precision=precision(task),
        gamma=_float(task.get("noise_gamma"), 0.0),
        seed=(cfg.get("common") or {}).get("seed"),
        command=command(hydra, files["overrides"], cwd),
        table=((hydra.get("callbacks") or {}).get("row") or {}).get("table"),
    )
    # without checkpoint_last.pt: what it said when the training returned, and what a page that
    # copied the row read then (a page's records; it fills what an older record's at_end lacks)
    paged = (rec or {}).get("as_paged")  # a page's copy: the row as it was when paged
    ended = {**(paged or {}), **((rec or {}).get("at_end") or {})}
    row["training"] = progress.training(run_dir, cfg, ended or None)
    if row["status"] == "training" and not paged and alive(row.get("process")) is False:
        row["status"] = "stopped"
    return row


def at_end(run_dir: str) -> Optional[Dict]:
    """The facts of the row's checkpoint_last.pt that the page needs (:data:`.progress.AT_END`),
    for its record when the training returns; None without a readable row."""
    try:
        row = read(run_dir)
        return {k: row["training"][k] for k in progress.AT_END}
    except Exception:  # no row, or files it cannot read: the record goes without
        return None


def _float(value, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def read_sweep(sweep_dir: str) -> List[Dict]:
    """The rows of a sweep folder (its sub-folders with a record or Hydra's files)."""
    rows = []
    for name in sorted(os.listdir(sweep_dir)):
        run_dir = os.path.join(sweep_dir, name)
        row = read(run_dir) if os.path.isdir(run_dir) else None
        if row is not None:
            rows.append(row)
    return rows


def ending(row: Dict) -> str:
    """How the row's training ended, or where it is: ``protocol`` (a validation-driven rule
    ended it: all halvings trained, or patience), ``time`` (the time budget), ``max_update``,
    ``max_epoch`` (an epoch count capped it), ``stopped`` (its process is gone), ``failed``,
    ``unreadable``, ``training``; ``ended`` for a training that ended for no reason its facts
    show (another scheduler's minimum learning rate, say)."""
    status = row["status"]
    if status in ("training", "failed", "stopped", "unreadable"):
        return status
    stop = row["training"]["stop"]
    if stop in ("halvings", "patience"):
        return "protocol"
    return stop or "ended"


def position_words(row: Dict) -> str:
    """``epoch 3 (40% of it), lr 0.5, 1 of 8 halvings``: where the training is or stopped."""
    t = row["training"]
    done, saved = t["epochs_done"], t.get("resume_at") or ""
    if not done:
        text = "epoch 1, before its first progress record"
    elif done % 1:
        text = f"epoch {int(done) + 1} ({done % 1:.0%} of it)"
    else:
        text = f"after epoch {int(done)}"
    if not done % 1 and saved.startswith("update ") and saved.endswith(f"epoch {int(done) + 1}"):
        text = saved  # saved inside the next epoch before a progress record said so
    if t["lr"] is not None:
        text += f", lr {t['lr']:g}"
    if t["halvings"] is not None:
        text += f", {t['halvings']} of {t['max_halvings']} halvings"
    return text
