"""The quick start's helpers: a progress view of concurrent runs, and the final report.

    python recipes/quickstart.py watch --max-epoch N NAME=LOG:PID [NAME=LOG:PID ...]
    python recipes/quickstart.py report [--dry-run] --work DIR --out DIR NAME [NAME ...]

``watch`` prints, every ``--every`` seconds while the processes run, each run's epoch, the share of
the epoch done, the last train and valid perplexity and an estimate of the time left to
``--max-epoch``; its exit status is 1 if any process failed (their exit codes are read from
``LOG.exit``, written by the recipe). ``report`` reads each run's evaluation outputs
(``valid.eval.log``, ``test.eval.log``) and training log under ``DIR/NAME/`` and writes the table
(valid/test perplexity per run and the difference to the first) and Figure 1 of the paper, with the
training commands (``command.txt``) and the evaluation commands (recorded by ``recipes/steps.py``).
The device is chosen by ``recipes/steps.py device``.
"""

import argparse
import logging
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
logging.disable(logging.INFO)  # importing the plugin imports fairseq, which logs at INFO

from report import perplexity  # noqa: E402
from steps import read_marker, shown, shown_line  # noqa: E402

from fairseq_noising.analysis import logs  # noqa: E402

_INNER = re.compile(r"epoch (\d+):\s+(\d+) / (\d+) ")
_LR = re.compile(r"\| lr ([0-9.e+-]+) \|")


def fail(message: str) -> None:
    sys.exit(f"quickstart.sh: {message}")


def progress(path: str, max_epoch: int):
    """(epochs done + share of the current one, last train ppl, last valid ppl, lr) of a log."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return 0.0, None, None, None
    run = logs.parse_log(text)
    done = max(run.valid_ppl, default=0)
    share = 0.0
    for epoch, step, steps in _INNER.findall(text):
        if int(epoch) == done + 1:
            share = int(step) / int(steps)
    lrs = _LR.findall(text)
    last = lambda d: d[max(d)] if d else None  # noqa: E731
    return (
        min(done + share, max_epoch),
        last(run.train_ppl),
        last(run.valid_ppl),
        (lrs[-1] if lrs else None),
    )


def watch(runs, max_epoch: int, every: float) -> int:
    start = time.time()
    first = {name: None for name, _, _ in runs}
    while True:
        alive = [pid for _, _, pid in runs if _alive(pid)]
        parts, etas = [], []
        for name, log, pid in runs:
            done, train, valid, lr = progress(log, max_epoch)
            if first[name] is None:
                first[name] = done  # a resumed run: time only what this start trains
            if done >= max_epoch or not _alive(pid):
                part = f"{name}: {int(done)} epochs done"
            else:
                part = f"{name}: epoch {int(done) + 1}/{max_epoch} {done % 1:.0%}"
            if train is not None:
                part += f", train ppl {train:.1f}"
            if valid is not None:
                part += f", valid ppl {valid:.1f}"
            if lr is not None:
                part += f", lr {lr}"
            parts.append(part)
            trained = done - first[name]
            if trained > 0.02:
                etas.append((time.time() - start) / trained * (max_epoch - done))
        eta = f"; at most {max(etas) / 60:.0f} min left" if etas else ""
        clock = time.strftime("%H:%M:%S")
        print(f"[{clock}] " + " | ".join(parts) + (eta if alive else ""), flush=True)
        if not alive:
            break
        time.sleep(every)
    status = 0
    for name, log, _ in runs:
        code = _exit_code(log)
        if code != 0:
            print(
                f"quickstart.sh: training {name} failed (exit {code}), see {log}", file=sys.stderr
            )
            status = 1
    return status


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a finished child that the shell has not reaped yet is a zombie
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _exit_code(log: str):
    try:
        with open(log + ".exit") as f:
            return int(f.read().strip() or 1)
    except (OSError, ValueError):
        return None


def report(work: str, out: str, names, title: str):
    rows, curves = [], {}
    for name in names:
        run_dir = os.path.join(work, name)
        valid = perplexity(os.path.join(run_dir, "valid.eval.log"))
        test = perplexity(os.path.join(run_dir, "test.eval.log"))
        if valid is None or test is None:
            fail(f"no perplexity in {run_dir}/valid.eval.log or test.eval.log: did evaluation run?")
        run = logs.read_log(os.path.join(run_dir, "train.log"))
        rows.append((name, run.noise_gamma or 0.0, len(run.valid_ppl), valid, test))
        curves[f"{name}" + (f" (gamma_0 {run.noise_gamma:g})" if run.noise_gamma else "")] = (
            run.train_ppl,
            run.valid_ppl,
        )
    os.makedirs(out, exist_ok=True)
    from fairseq_noising.analysis import plots  # matplotlib: only when drawing

    figure = plots.curves(curves, os.path.join(out, "curves.png"))
    base_valid, base_test = rows[0][3], rows[0][4]
    lines = [
        f"# {title}",
        "",
        "| scheme | gamma_0 | epochs | valid ppl | test ppl | valid diff | test diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, gamma, epochs, valid, test in rows:
        lines.append(
            f"| {name} | {gamma:g} | {epochs} | {valid:.2f} | {test:.2f} | "
            f"{valid - base_valid:+.2f} | {test - base_test:+.2f} |"
        )
    lines += [
        "",
        "Differences are to the first row. Figure 1 of the paper (training and "
        "validation perplexity per epoch):",
        "",
        "![curves](curves.png)",
        "",
        "Training commands:",
        "",
    ]
    for name in names:
        with open(os.path.join(work, name, "command.txt"), encoding="utf-8") as f:
            lines.append("    " + shown(f.read().strip()))
    lines += ["", "Evaluation of each run's checkpoint_best.pt on valid and test:", ""]
    for name in names:
        for split in ("valid", "test"):
            line = read_marker(os.path.join(work, name, f"{split}.eval.log.done"))
            if line is None:
                fail(f"{work}/{name}/{split}.eval.log.done is missing: did evaluation run?")
            lines.append("    " + shown_line(line))
    lines.append("")
    table = "\n".join(lines)
    path = os.path.join(out, "results.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(table)
    return table, path, figure


def main(argv=None):
    parser = argparse.ArgumentParser(prog="recipes/quickstart.py")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("watch")
    p.add_argument("--max-epoch", type=int, required=True)
    p.add_argument("--every", type=float, default=30.0)
    p.add_argument("runs", nargs="+", metavar="NAME=LOG:PID")
    p = sub.add_parser("report")
    p.add_argument("--dry-run", action="store_true", help="say what a real run writes")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--title", default="Quick start")
    p.add_argument("names", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "watch":
        runs = []
        for spec in args.runs:
            name, rest = spec.split("=", 1)
            log, pid = rest.rsplit(":", 1)
            runs.append((name, log, int(pid)))
        return watch(runs, args.max_epoch, args.every)
    if args.dry_run:
        print(f"(dry run: nothing was run; a real run writes {args.out}/results.md and curves.png)")
        return 0
    table, path, figure = report(args.work, args.out, args.names, args.title)
    print(table)
    print(f"table: {path}\nfigure: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
