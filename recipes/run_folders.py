"""The recipes' run folders: what each one trained and how its training ended (its markers), the
figures of its evaluations, and gamma_0 chosen on validation perplexity.

A run folder's markers (``recipes/steps.py``, ``recipes/rows.py``): ``.command`` the training
command as queued; ``.done`` the same once fairseq-train ended by itself; ``.budget`` once the time
budget stopped it (a rerun resumes it); ``.failed`` the exit code and the log's last line. A run
with ``.done`` or ``.budget`` has a ``checkpoint_best.pt`` to evaluate (:func:`trained`)."""

import os
import re
import shlex
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from steps import fail, newer_inputs, read_marker, shown

_EVAL_LM = re.compile(r"Perplexity: ([0-9.]+)")
_VALIDATE = re.compile(r"valid on '[^']+' subset \|.*?\| ppl ([0-9.]+)")
_SCORE = re.compile(r"^(BLEU|tok BLEU) ([0-9.]+)\s*$", re.M)
_SIGNATURE = re.compile(r"^(BLEU|tok BLEU) signature (\S+)\s*$", re.M)


def read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def fresh(path: str) -> bool:
    """An evaluation output whose marker (``PATH.done``) is there and no input of its command is
    newer (it evaluated the checkpoint that is there now)."""
    line = read_marker(path + ".done")
    if line is None or not os.path.isfile(path):
        return False
    return not newer_inputs(path + ".done", shlex.split(line.rpartition(" > ")[0] or line))


def perplexity(path: str) -> Optional[float]:
    """The perplexity of an evaluation output: fairseq-eval-lm's ``Perplexity: X`` or
    fairseq-validate's ``valid on '...' subset | ... | ppl X`` (the last one)."""
    text = read_text(path)
    if text is None:
        return None
    found = _EVAL_LM.findall(text) or _VALIDATE.findall(text)
    return float(found[-1]) if found else None


def bleu_scores(path: str) -> Dict[str, float]:
    """``{"BLEU": x, "tok BLEU": y}`` from the output of ``prepare_translation.py score``."""
    return {name: float(value) for name, value in _SCORE.findall(read_text(path) or "")}


def bleu_signatures(path: str) -> Dict[str, str]:
    """``{"BLEU": "nrefs:1|case:mixed|...", ...}``: sacrebleu's signature of each score."""
    return dict(_SIGNATURE.findall(read_text(path) or ""))


def flag_value(cmd: Sequence[str], flag: str, default: str) -> str:
    """The value of ``flag`` in a command line (the last one wins, as in argparse)."""
    value = default
    for i, arg in enumerate(cmd[:-1]):
        if arg == flag:
            value = cmd[i + 1]
    return value


@dataclass
class Run:
    path: str
    command: str  # the training command line, as recorded
    scheme: str
    gamma: str  # as the command gives it
    side: str = "both"
    lr_scheduler: str = ""  # --lr-scheduler of the command ("" when it names none)
    state: str = "done"  # done | budget | failed | training | waiting (see the module's text)
    failure: str = ""  # a failed run: exit code and the log's last line

    @property
    def row(self) -> str:
        return self.scheme if self.side == "both" else f"{self.scheme}:{self.side}"

    @property
    def name(self) -> str:
        """The run's name in the page's logs folder, e.g. ``kn-source-g0.2``."""
        return f"{self.row.replace(':', '-')}-g{self.gamma}"

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)


def trained(path: str) -> bool:
    """A run whose training ended by itself or by the time budget: it has a checkpoint to use."""
    return any(os.path.isfile(os.path.join(path, m)) for m in (".done", ".budget"))


def read_run(path: str, prog: str, partial: bool = False) -> Run:
    """A run folder; unless ``partial``, one whose training has ended (finished, stopped by the
    time budget or failed)."""

    def marker(name):
        return read_marker(os.path.join(path, name))

    state, line = "done", marker(".done")
    if line is None:
        state, line = "budget", marker(".budget")
    if line is None:
        line = marker(".command")
        state = "training" if os.path.isfile(os.path.join(path, "train.log")) else "waiting"
        if os.path.isfile(os.path.join(path, ".failed")):
            state = "failed"
    if line is None or (state in ("training", "waiting") and not partial):
        fail(prog, f"{shown(path)} holds no finished training (no .done)")
    cmd = shlex.split(line)
    return Run(
        path=path,
        command=line,
        scheme=flag_value(cmd, "--noise-scheme", "none"),
        gamma=flag_value(cmd, "--noise-gamma", "0"),
        side=flag_value(cmd, "--noise-side", "both"),
        lr_scheduler=flag_value(cmd, "--lr-scheduler", ""),
        state=state,
        failure=(read_text(os.path.join(path, ".failed")) or "").strip(),
    )


def choose(valid: Sequence[Tuple[str, Optional[float]]]) -> Optional[str]:
    """The key with the lowest validation perplexity (the first of equals); None if any is missing."""
    if not valid or any(ppl is None for _, ppl in valid):
        return None
    best = valid[0]
    for key, ppl in valid[1:]:
        if ppl < best[1]:
            best = (key, ppl)
    return best[0]


def best_run(runs: Sequence[str], dry_run: bool, prog: str) -> str:
    """The run (of one scheme) to evaluate on test: the trained one with the lowest validation
    perplexity; "" when none of them trained (all failed)."""
    if dry_run and not any(trained(run) for run in runs):
        return runs[0] if len(runs) == 1 else re.sub(r"-g[^/]*$", "-gBEST", runs[0].rstrip("/"))
    runs = [run for run in runs if trained(run)]
    if len(runs) <= 1:
        return runs[0] if runs else ""
    valid = [(run, perplexity(os.path.join(run, "valid.eval.log"))) for run in runs]
    chosen = choose(valid)
    if chosen is not None:
        return chosen
    missing = next(run for run, ppl in valid if ppl is None)
    fail(prog, f"no validation perplexity in {shown(os.path.join(missing, 'valid.eval.log'))}")
