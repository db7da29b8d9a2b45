"""What the subcommands of ``fairseq-noise-analyze`` share: labels, tables, JSON, model options."""

import json
import math
import os
import sys
from typing import Dict, List, Optional, Tuple

import torch

from .arguments import expand_sweeps, match_ppl, resolve

EVAL_MODES = ("auto", "stateless", "stateful")


def default_label(path: str, loaded=None, epoch=None) -> str:
    name = os.path.basename(os.path.dirname(os.path.abspath(path))) or path
    if epoch is not None:
        name = f"{name} e{epoch}"
    if loaded is not None:
        return f"{name} ({loaded.scheme} {loaded.gamma:g})"
    return name


def fmt(x, digits=2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def print_table(headers: List[str], rows: List[List], out=None) -> None:
    out = out or sys.stdout
    cells = [[str(h) for h in headers]]
    cells += [[c if isinstance(c, str) else fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for k, r in enumerate(cells):
        line = (c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        print("  ".join(line), file=out)
        if k == 0:
            print("  ".join("-" * w for w in widths), file=out)
    out.flush()


def _jsonable(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def write_json(path: Optional[str], result: Dict) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2, default=_jsonable)


def series(results: List[Dict], *keys: str) -> List[List]:
    """One list per key of the values of ``results`` (a figure's data)."""
    return [[r[k] for r in results] for k in keys]


def draw(args, plot, *data, **kwargs) -> None:
    """``plot(*data, args.output, **kwargs)`` when --output names a PNG file."""
    if args.output:
        plot(*data, args.output, **kwargs)
        print(f"wrote {args.output}")


def add_output_args(p, png=True):
    p.add_argument("--json", default=None, metavar="FILE", help="also write the numbers as JSON")
    if png:
        p.add_argument("--output", default=None, metavar="PNG", help="draw the figure into PNG")


def add_model_args(p, split_default="valid"):
    p.add_argument(
        "checkpoints",
        nargs="+",
        metavar="CKPT",
        help="checkpoint files, run folders (their checkpoint_best.pt) or a sweep's folder (its "
        "rows) ([LABEL=]PATH)",
    )
    p.add_argument(
        "--match-ppl",
        type=match_ppl,
        default=None,
        metavar="PPL",
        help="of each run folder, the epoch checkpoint whose logged validation perplexity is "
        "nearest PPL (auto: the best perplexity of the folder that did worst)",
    )
    p.add_argument(
        "--data", default=None, help="binarized data directory (default: the checkpoint's)"
    )
    p.add_argument(
        "--split", default=split_default, help=f"split to evaluate (default: {split_default})"
    )
    p.add_argument(
        "--eval-mode",
        choices=EVAL_MODES,
        default="auto",
        help="stateless blocks, or carry the LSTM state across blocks (auto: as trained)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="sequences per batch (stateful: the number of contiguous rows)",
    )
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per batch (stateless mode)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even when CUDA is available")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--num-threads",
        type=int,
        default=None,
        help="torch intra-op CPU threads (default: torch's choice)",
    )
    p.add_argument(
        "--log-format",
        default=None,
        choices=("none", "simple", "tqdm", "json"),
        help="progress display (default: tqdm on a terminal, simple otherwise)",
    )


def score_models(args, score) -> Tuple[List[Dict], Dict]:
    """``score(label, LoadedModel)`` of every model argument, loaded one at a time (a run folder
    as :mod:`.arguments` picks its checkpoint), and what the JSON adds: with ``--match-ppl`` the
    target, and each result's epoch and logged validation perplexity."""
    from ..model_io import LoadedModel, pick_device

    picks, target = resolve(expand_sweeps(args.checkpoints), args.match_ppl)
    if target is not None:
        print(f"matched at validation perplexity {target:.2f} (as logged at the epochs' ends):")
        for pick in picks:
            name = pick.label or os.path.dirname(pick.path)
            print(f"  {name}: epoch {pick.epoch}, {pick.logged_ppl:.2f}")
    device = pick_device(args.cpu)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    results = []
    for pick in picks:
        loaded = LoadedModel(
            pick.path,
            data=args.data,
            eval_mode=args.eval_mode,
            batch_size=args.batch_size,
            max_tokens=args.max_tokens,
            device=device,
            seed=args.seed,
            log_format=args.log_format,
        )
        r = score(pick.label or default_label(pick.path, loaded, pick.epoch), loaded)
        if target is not None:
            r.update(epoch=pick.epoch, logged_valid_ppl=pick.logged_ppl)
        results.append(r)
    return results, ({} if target is None else {"match_ppl": target})


def add_model_parser(sub, name: str, help: str, run):
    """A subcommand that runs checkpoints over a split and draws a figure."""
    p = sub.add_parser(name, help=help)
    add_model_args(p)
    add_output_args(p)
    p.set_defaults(run=run)
    return p
