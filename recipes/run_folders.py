"""The recipes' run folders: what each one trained (read from its ``.done`` marker), the figures
of its evaluations, and gamma_0 chosen on validation perplexity."""

import os
import re
import shlex
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from steps import fail, read_marker, shown

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

    @property
    def row(self) -> str:
        return self.scheme if self.side == "both" else f"{self.scheme}:{self.side}"

    @property
    def name(self) -> str:
        """The run's name in the page's logs folder, e.g. ``kn-source-g0.2``."""
        return f"{self.row.replace(':', '-')}-g{self.gamma}"

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)


def read_run(path: str, prog: str) -> Run:
    line = read_marker(os.path.join(path, ".done"))
    if line is None:
        fail(prog, f"{shown(path)} holds no finished training (no .done)")
    cmd = shlex.split(line)
    return Run(
        path=path,
        command=line,
        scheme=flag_value(cmd, "--noise-scheme", "none"),
        gamma=flag_value(cmd, "--noise-gamma", "0"),
        side=flag_value(cmd, "--noise-side", "both"),
        lr_scheduler=flag_value(cmd, "--lr-scheduler", ""),
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
    if len(runs) == 1:
        return runs[0]
    valid = [(run, perplexity(os.path.join(run, "valid.eval.log"))) for run in runs]
    chosen = choose(valid)
    if chosen is not None:
        return chosen
    if dry_run:
        return re.sub(r"-g[^/]*$", "-gBEST", runs[0].rstrip("/"))
    missing = next(run for run, ppl in valid if ppl is None)
    fail(prog, f"no validation perplexity in {shown(os.path.join(missing, 'valid.eval.log'))}")
