"""A row's evaluation of its ``checkpoint_best.pt``, its figures at full precision, from fairseq's
Python entry points and return values (never from printed output).

    fairseq-noise-eval RUN_DIR [RUN_DIR ...]      (from the folder the sweep ran in)

Language models: ``fairseq_cli.eval_lm.main`` with ``--stateful-bptt --batch-size 1`` (every
token with its whole left context) on valid and test; it returns the loss in bits. Translation:
perplexity per target token on valid (the model's log-probabilities of the references), beam
search on test (fairseq's generator, as ``fairseq-generate`` runs it), BLEU of the detokenized
hypotheses against the raw references (:mod:`.bleu`). The figures go into the row's record,
with the fairseq commands that give the same figures with fairseq's own printing (rounded),
written as they run from the sweep's folder. The row's callback runs this module in a process
of its own when the row's training ends.
"""

import argparse
import math
import os
import shlex
import sys
import traceback
from typing import Dict, List

from ..errors import PREFIX, NoisingError
from . import PLUGIN_DIR, bleu, record

BATCH = ["--batch-size", "64", "--required-batch-size-multiple", "1"]


def _argv(cfg: Dict, checkpoint: str, cwd: str, shown: bool) -> List[str]:
    """The arguments every evaluation shares: paths relative to ``cwd`` (the folder the sweep
    ran in) for the page (``shown``), absolute to run them from anywhere."""
    task = cfg["task"]
    where = cwd if os.path.isdir(cwd) else os.getcwd()  # a sweep folder copied elsewhere
    paths = [os.path.join(where, str(p)) for p in (task["data"], cfg["common"]["user_dir"])]
    paths.append(os.path.abspath(checkpoint))
    if shown:
        paths = [record.relative(p, where) for p in paths]
    else:  # the plugin that runs here (fairseq refuses a second one of the same name)
        paths[1] = PLUGIN_DIR
    data, user_dir, path = paths
    args = [data, "--user-dir", user_dir, "--task", task["_name"], "--path", path]
    return args + (["--cpu"] if cfg["common"].get("cpu") else [])


def _config(parser, argv: List[str]):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    return convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))


def language_model(cfg: Dict, checkpoint: str, cwd: str) -> Dict:
    """Valid and test perplexity of stateful evaluation (``eval_lm.main``'s loss, in bits)."""
    from fairseq import options
    from fairseq_cli import eval_lm

    figures: Dict = {"commands": []}
    block = str(cfg["task"].get("tokens_per_sample", 35))
    for split in ("valid", "test"):
        more = ["--gen-subset", split, "--stateful-bptt", "--batch-size", "1"]
        more += ["--tokens-per-sample", block]
        argv = _argv(cfg, checkpoint, cwd, shown=False) + more
        results = eval_lm.main(_config(options.get_eval_lm_parser(), argv))
        figures[f"{split}_ppl"] = 2.0 ** float(results["loss"])
        shown = _argv(cfg, checkpoint, cwd, shown=True) + more
        figures["commands"].append(shlex.join(["fairseq-eval-lm", *shown]))
    return figures


def _batches(task, split: str, models, cfg):
    from fairseq import utils

    task.load_dataset(split)
    return task.get_batch_iterator(
        dataset=task.dataset(split),
        max_tokens=cfg.dataset.max_tokens,
        max_sentences=cfg.dataset.batch_size,
        max_positions=utils.resolve_max_positions(
            task.max_positions(), *[m.max_positions() for m in models]
        ),
        required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
        seed=cfg.common.seed,
    ).next_epoch_itr(shuffle=False)


def translation(cfg: Dict, checkpoint: str, cwd: str, options: Dict, out_dir: str) -> Dict:
    """Valid perplexity per target token, test BLEU (and tok BLEU with a tokenized reference)."""
    import torch
    from fairseq import options as fairseq_options
    from fairseq import tasks, utils
    from fairseq_cli.generate import get_symbols_to_strip_from_output

    from .. import scoring

    if not options.get("reference"):
        raise NoisingError(
            "hydra.callbacks.row.reference is not set: BLEU needs the raw test references"
        )
    task_cfg, figures = cfg["task"], {"commands": []}
    pair = [
        "--source-lang",
        str(task_cfg["source_lang"]),
        "--target-lang",
        str(task_cfg["target_lang"]),
    ]
    more = ["--gen-subset", "test", "--beam", str(options["beam"])]
    more += [str(a) for a in options.get("generate_args") or []]
    gen = _config(
        fairseq_options.get_generation_parser(),
        _argv(cfg, checkpoint, cwd, shown=False) + pair + BATCH + more,
    )
    shown = _argv(cfg, checkpoint, cwd, shown=True) + pair + BATCH
    utils.import_user_module(gen.common)
    model, _, task = scoring.load_model(checkpoint, task=tasks.setup_task(gen.task))
    models, tgt = [model], task.target_dictionary
    nll, count = 0.0, 0
    for sample in _batches(task, "valid", models, gen):
        lprobs, _ = scoring.log_probs(model, sample["net_input"])
        target = sample["target"]
        part, n = scoring.summed_nll(lprobs, target, target.ne(tgt.pad()))
        nll, count = nll + part, count + n
    figures["valid_ppl"] = math.exp(nll / count)
    figures["commands"].append(shlex.join(["fairseq-validate", *shown, "--valid-subset", "valid"]))
    generator = task.build_generator(models, gen.generation)
    strip = get_symbols_to_strip_from_output(generator)
    hyps: Dict[int, str] = {}
    with torch.no_grad():
        for sample in _batches(task, "test", models, gen):
            for i, hypos in enumerate(task.inference_step(generator, models, sample)):
                _, text, _ = utils.post_process_prediction(
                    hypo_tokens=hypos[0]["tokens"].int().cpu(),
                    src_str="",
                    alignment=None,
                    align_dict=None,
                    tgt_dict=tgt,
                    remove_bpe=gen.common_eval.post_process,
                    extra_symbols_to_ignore=strip,
                )
                hyps[int(sample["id"][i])] = text
    figures["commands"].append(shlex.join(["fairseq-generate", *shown, *more]))
    ordered = [hyps[i] for i in range(len(hyps))]
    with open(os.path.join(out_dir, "test.hyp"), "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in ordered))
    figures.update(
        bleu.score(
            ordered,
            options["reference"],
            str(task_cfg["target_lang"]),
            options.get("tokenizer") or "moses",
            os.path.join(out_dir, "test.detok"),
            options.get("tok_reference"),
            bool(options.get("lowercase")),
        )
    )
    unk = [line.split().count(tgt.unk_string()) for line in ordered]
    figures["unk"] = {"tokens": sum(unk), "sentences": sum(n > 0 for n in unk), "of": len(unk)}
    return figures


def chosen_by(checkpoint: str) -> Dict:
    """The validation after which fairseq saved ``checkpoint``: ``{"epoch", "updates",
    "inside", "loss", "where"}`` (``inside``: a save inside an epoch, which the paper's
    protocol never picks)."""
    from .. import fairseq_compat
    from ..checkpoint_safety import read_checkpoint

    return fairseq_compat.checkpoint_position(read_checkpoint(checkpoint))


def evaluate_row(run_dir: str) -> Dict:
    """Evaluates a row's ``checkpoint_best.pt`` and records the figures in its ``row.json``;
    reuses the record's figures when the checkpoint has not changed since (adding which
    validation chose the checkpoint where an older record lacks it)."""
    from .. import models, optim, tasks  # noqa: F401  (registered with fairseq: in-process runs)

    files = record.hydra_files(run_dir)
    if files is None:
        raise NoisingError(f"{run_dir} is no sweep row: .hydra/config.yaml is missing")
    cfg, hydra = files["config"], files["hydra"]
    cwd = hydra["runtime"]["cwd"]
    rec = record.read_record(run_dir) or {"format": record.FORMAT, "status": "ended"}
    checkpoint = os.path.join(run_dir, "checkpoint_best.pt")  # save_dir: the row's folder
    if not os.path.isfile(checkpoint):
        raise NoisingError(f"{checkpoint} is missing: the training saved no best checkpoint")
    stamp = os.path.getmtime(checkpoint)
    if (rec.get("evaluation") or {}).get("checkpoint_mtime") == stamp:
        figures = rec["evaluation"]
        if "chosen" not in figures:  # recorded by a version that did not say: read it, keep all
            figures["chosen"] = chosen_by(checkpoint)
            record.write(run_dir, rec)
        return figures
    if cfg["task"]["_name"].endswith("translation"):
        opts = dict(((hydra.get("callbacks") or {}).get("row") or {}))
        opts.setdefault("beam", 5)
        figures = translation(cfg, checkpoint, cwd, opts, run_dir)
    else:
        figures = language_model(cfg, checkpoint, cwd)
    figures.update(checkpoint_mtime=stamp, evaluated=record.now(), chosen=chosen_by(checkpoint))
    shown_dir = record.relative(
        os.path.abspath(run_dir), cwd if os.path.isdir(cwd) else os.getcwd()
    )
    figures["commands"].insert(0, shlex.join(["fairseq-noise-eval", shown_dir]))
    rec = record.read_record(run_dir) or rec  # the callback may have written meanwhile
    rec["evaluation"] = figures
    rec.pop("evaluation_error", None)
    if rec.get("status") == "failed" and str(rec.get("error", "")).startswith("evaluation:"):
        rec["status"] = "ended"  # the evaluation that had failed now ran
        rec.pop("error")
    record.write(run_dir, rec)
    return figures


def _record_failure(run_dir: str, line: str) -> None:
    """Why the evaluation failed, in the row's record (its callback reads it from there)."""
    rec = record.read_record(run_dir)
    if rec is not None:
        rec["evaluation_error"] = line.removeprefix(PREFIX)
        record.write(run_dir, rec)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fairseq-noise-eval", description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a row's folder")
    args = parser.parse_args(argv)
    status = 0
    for run_dir in args.run_dirs:
        try:
            figures = evaluate_row(run_dir)
        except Exception as e:
            line = str(e) if isinstance(e, NoisingError) else f"{type(e).__name__}: {e}"
            _record_failure(run_dir, line.splitlines()[0] if line else type(e).__name__)
            if not isinstance(e, NoisingError):
                traceback.print_exc()
            print(f"fairseq-noise-eval: {run_dir}: {line}", file=sys.stderr)
            status = 1
            continue
        shown = {k: v for k, v in figures.items() if k.endswith("_ppl")}
        shown.update({k: figures[k]["score"] for k in ("bleu", "tok_bleu") if k in figures})
        print(f"{run_dir}: " + ", ".join(f"{k} {v:.4f}" for k, v in shown.items()))
    return status


if __name__ == "__main__":
    sys.exit(main())
