"""The results page of a sweep, from its rows (:mod:`.record`), at any moment.

    fairseq-noise-page SWEEP_DIR [--out PAGE.md] [--table NAME] [--title TEXT] [--paper|--no-paper]
                       [--path-as FOLDER=SHOWN ...]

What the page holds, and the rows' files beside it: docs/sweeps.md, "The page".
"""

import argparse
import fcntl
import json
import logging
import os
import shlex
import sys
from contextlib import contextmanager
from typing import Dict, List, Optional, Sequence

from ...errors import NoisingError
from .. import events, record
from . import render, tables

LOCK = ".results.lock"
OPTIONS = ".pages.json"  # each page's options, for the rewrites when rows end
DEFAULT_NAME = "results.md"  # a sweep's page, in its folder


@contextmanager
def _one_writer(sweep_dir: str):
    """One page writer of a sweep at a time (rows that end together, a user's command)."""
    with open(os.path.join(sweep_dir, LOCK), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _options(sweep_dir: str, out: str, given: Dict, by_row: bool) -> Dict:
    """The options of the page ``out``: those given, remembered in the sweep's folder; for a
    rewrite by a row that ends, those the page was last written with (the row's own title only
    where none was given)."""
    path = os.path.join(sweep_dir, OPTIONS)
    try:
        with open(path, encoding="utf-8") as f:
            known = json.load(f)
    except (OSError, ValueError):
        known = {}
    key = os.path.abspath(out)
    if by_row and key in known:
        return {**given, **{k: v for k, v in known[key].items() if v is not None}}
    if not by_row:
        known[key] = given
        with open(path + f".{os.getpid()}.part", "w", encoding="utf-8") as f:
            json.dump(known, f, indent=1)
        os.replace(path + f".{os.getpid()}.part", path)
    return given


def write(
    sweep_dir: str,
    out: Optional[str] = None,
    table: Optional[str] = None,
    title: Optional[str] = None,
    show_paper: Optional[bool] = None,
    config_dir: Optional[str] = None,
    path_as: Sequence[str] = (),
    by_row: bool = False,
) -> Optional[str]:
    """Writes the page of a sweep folder (default ``SWEEP_DIR/results.md``); None without rows.
    ``table``: the config whose table to use (default: the rows' own), in ``config_dir``
    (default: the one the rows' sweep was given). ``by_row``: the rewrite when a row ends."""
    out = out or os.path.join(sweep_dir, DEFAULT_NAME)
    with _one_writer(sweep_dir):
        config_dir = os.path.abspath(config_dir) if config_dir else None
        given = dict(table=table, title=title, show_paper=show_paper, config_dir=config_dir)
        o = _options(sweep_dir, out, {**given, "path_as": list(path_as)}, by_row)
        rows = record.read_sweep(sweep_dir)
        if not rows:
            return None
        good = [r for r in rows if r["status"] != "unreadable"]
        first = good[0] if good else {}
        name = first.get("config_name") or "a sweep"
        if o["table"] is not None:
            where = o["config_dir"] or first.get("config_dir") or os.path.join("recipes", "config")
            spec = tables.from_config(o["table"], where)
        else:
            spec = tables.spec(first.get("table"), name)
        on_data = tables.on_its_data(spec, good)
        if not on_data:  # the user's data: the table's title and note are not theirs
            data = sorted(
                {record.relative(str(r["config"]["task"]["data"]), r["cwd"]) for r in good}
            )
            spec.update(title=f"{name} on {', '.join(data)}", note="")
        if o["title"]:
            spec["title"] = o["title"]
        shown = o["show_paper"]
        show = bool(spec["paper"]) and (on_data if shown is None else shown)
        cwd = first.get("cwd") if first.get("cwd") and os.path.isdir(first["cwd"]) else os.getcwd()
        words = ["fairseq-noise-page", record.relative(os.path.abspath(sweep_dir), cwd)]
        words += ["--out", record.relative(os.path.abspath(out), cwd)]
        words += ["--table", o["table"]] if o["table"] else []
        words += ["--title", o["title"]] if o["title"] else []
        words += [] if shown is None else ["--paper" if shown else "--no-paper"]
        shown_as = [
            f"{record.relative(f, cwd)}={v}" for f, v in (a.split("=", 1) for a in o["path_as"])
        ]
        render.render(rows, spec, show, out, shlex.join(words), shown_as)
        return out


def import_logs(sweep_dir: str) -> List[str]:
    """Writes the progress file of each row that has none (or an imported one) from its
    training log (:func:`fairseq_noising.analysis.logs.progress_events`); the rows' names."""
    from ...analysis.logs import progress_events

    done = []
    for name in sorted(os.listdir(sweep_dir)):
        log = os.path.join(sweep_dir, name, "hydra_train.log")
        found = events.read(os.path.join(sweep_dir, name))
        if not os.path.isfile(log) or (found and found[0]["tag"] != "imported"):
            continue
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = [json.dumps(e) + "\n" for e in progress_events(f.read())]
        part = os.path.join(sweep_dir, name, events.FILE + ".part")
        with open(part, "w", encoding="utf-8") as f:
            f.write("".join(lines))
        os.replace(part, os.path.join(sweep_dir, name, events.FILE))
        done.append(name)
    return done


def main(argv=None) -> int:
    if argv is None:  # the command: its own logging, set before fairseq's import-time one (a
        # basicConfig at DEBUG in fairseq.models.wav2vec) would let matplotlib's debug lines out
        logging.basicConfig(format="%(levelname)s | %(name)s | %(message)s", level=logging.INFO)
        logging.getLogger("matplotlib").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(prog="fairseq-noise-page", description=__doc__.split("\n")[0])
    parser.add_argument("sweep_dir", metavar="SWEEP_DIR", help="the sweep folder (hydra.sweep.dir)")
    parser.add_argument("--out", help="the page (default SWEEP_DIR/results.md)")
    parser.add_argument("--table", help="the config whose title and paper's figures to use")
    parser.add_argument("--config-dir", help="where --table's config is (default: the sweep's)")
    parser.add_argument("--title", help="the page's title")
    parser.add_argument(
        "--paper",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show (or leave out) the paper's figures; default: when the rows trained on the "
        "paper's data",
    )
    parser.add_argument(
        "--path-as",
        action="append",
        default=[],
        metavar="FOLDER=SHOWN",
        help="write the paths under FOLDER in the page's commands under SHOWN instead (a sweep "
        "run outside a checkout, shown as it runs from one: --path-as ~/sweeps/ptb=runs/ptb)",
    )
    parser.add_argument(
        "--import-logs",
        action="store_true",
        help="rows trained before rows recorded a progress file: make theirs from their json "
        "training log (hydra_train.log) first",
    )
    args = parser.parse_args(argv)
    if not os.path.isdir(args.sweep_dir):
        parser.error(f"SWEEP_DIR {args.sweep_dir} is not a folder")
    if args.import_logs:
        for name in import_logs(args.sweep_dir):
            print(f"{name}: progress imported from its training log")
    for a in args.path_as:
        if "=" not in a or not a.split("=", 1)[0]:
            parser.error(f"--path-as expects FOLDER=SHOWN, got {a!r}")
    try:
        path = write(
            args.sweep_dir,
            args.out,
            args.table,
            args.title,
            args.paper,
            args.config_dir,
            [
                f"{os.path.abspath(os.path.expanduser(f))}={v}"
                for f, v in (a.split("=", 1) for a in args.path_as)
            ],
        )
    except NoisingError as e:
        parser.error(e.message)
    if path is None:
        parser.error(f"SWEEP_DIR {args.sweep_dir} holds no row records (row.json)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
