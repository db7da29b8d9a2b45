"""A row's evaluation of its ``checkpoint_best.pt``, run by the row when its training ends.

Language models: stateful ``fairseq-eval-lm`` (``--stateful-bptt --batch-size 1``: every token
with its whole left context) on valid and test. Translation: ``fairseq-validate`` (perplexity per
target token on valid), ``fairseq-generate`` on test (beam search) and BLEU (:mod:`.bleu`). Each
command runs in its own process (fairseq's console script as ``python -m``) with its output in the
row's folder; the figures and the commands go into the row's record.
"""

import os
import re
import shlex
import subprocess
import sys
from typing import Dict, List

from ..errors import NoisingError
from . import bleu

_EVAL_LM = re.compile(r"Perplexity: ([0-9.]+)")
_VALIDATE = re.compile(r"valid on '[^']+' subset \|.*?\| ppl ([0-9.]+)")
_SCRIPTS = {
    "eval_lm": "fairseq-eval-lm",
    "validate": "fairseq-validate",
    "generate": "fairseq-generate",
}


def _run(script: str, args: List[str], out: str, commands: List[str]) -> str:
    """Runs ``fairseq-SCRIPT ARGS > out``; its output, or a NoisingError with its last line."""
    commands.append(shlex.join([_SCRIPTS[script], *args]) + f" > {os.path.basename(out)}")
    with open(out, "w", encoding="utf-8") as f:
        done = subprocess.run(
            [sys.executable, "-m", f"fairseq_cli.{script}", *args],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    with open(out, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if done.returncode != 0:
        last = text.strip().splitlines()[-1:] or ["(no output)"]
        raise NoisingError(f"{_SCRIPTS[script]} failed (exit {done.returncode}): {last[0]}")
    return text


def _figure(pattern: re.Pattern, text: str, what: str) -> float:
    found = pattern.findall(text)
    if not found:
        raise NoisingError(f"no {what} in the output of its evaluation")
    return float(found[-1])


def _common(cfg: Dict) -> List[str]:
    task = cfg["task"]
    args = [str(task["data"]), "--user-dir", cfg["common"]["user_dir"], "--task", task["_name"]]
    return args + (["--cpu"] if cfg["common"].get("cpu") else [])


def language_model(cfg: Dict, run_dir: str, checkpoint: str) -> Dict:
    """Valid and test perplexity of stateful evaluation."""
    figures: Dict = {"commands": []}
    block = str(cfg["task"].get("tokens_per_sample", 35))
    for split in ("valid", "test"):
        args = _common(cfg) + ["--stateful-bptt", "--batch-size", "1", "--tokens-per-sample", block]
        args += ["--path", checkpoint, "--gen-subset", split]
        text = _run(
            "eval_lm", args, os.path.join(run_dir, f"{split}.eval.log"), figures["commands"]
        )
        figures[f"{split}_ppl"] = _figure(_EVAL_LM, text, f"{split} perplexity")
    return figures


def translation(cfg: Dict, run_dir: str, checkpoint: str, options: Dict) -> Dict:
    """Valid perplexity, test BLEU (and tok BLEU with a tokenized reference)."""
    if not options.get("reference"):
        raise NoisingError(
            "hydra.callbacks.row.reference is not set: BLEU needs the raw test references"
        )
    task, figures = cfg["task"], {"commands": []}
    pair = ["--source-lang", str(task["source_lang"]), "--target-lang", str(task["target_lang"])]
    batch = ["--batch-size", "64", "--required-batch-size-multiple", "1", "--path", checkpoint]
    args = _common(cfg) + pair + batch + ["--valid-subset", "valid"]
    text = _run("validate", args, os.path.join(run_dir, "valid.eval.log"), figures["commands"])
    figures["valid_ppl"] = _figure(_VALIDATE, text, "validation perplexity")
    args = _common(cfg) + pair + batch + ["--gen-subset", "test", "--beam", str(options["beam"])]
    args += [str(a) for a in options.get("generate_args") or []]
    generated = os.path.join(run_dir, "test.gen")
    _run("generate", args, generated, figures["commands"])
    scores = bleu.score(
        generated,
        options["reference"],
        str(task["target_lang"]),
        options.get("tokenizer") or "moses",
        os.path.join(run_dir, "test.detok"),
        options.get("tok_reference"),
    )
    figures.update(scores)
    return figures
