"""``fairseq-noise-preview``: shows the noise that training would apply, without training.

Usage::

    fairseq-noise-preview DATA --task noised_language_modeling --noise-scheme kn --noise-gamma 0.2 \\
        [--seed N] [--epoch E] [--split SPLIT] [task options] [--output FILE [--force]] \\
        [--max-examples K] [--show-examples N]

The parser is fairseq's own (common, dataset and task options; ``--user-dir`` defaults to this
plugin), and the task is built the way ``fairseq-train`` builds it, so every task option
(``--tokens-per-sample``, ``--sample-break-mode``, ``--noise-side``, ``--source-lang``, ...) means
what it means in training. The split (default: the training subset) is loaded as the training
subset and its examples are collated in id order, in batches, by the clean dataset's collater,
then noised by the task's :class:`~fairseq_noising.data.noised_dataset.NoisedDataset` for the
given epoch: the noise is a pure function of (seed, epoch, example id, position), so this is
exactly the noise training sees for that seed and epoch. A split other than the training subset
is noised the same way, as if it were the training subset (with its own statistics).

It prints, per side, the fraction of context positions noised (with the expectation under the
scheme's gamma), for ``kn``/``mkn`` the fraction of targets replaced, the most frequent
replacement tokens, and a few examples with the changed tokens marked ``[old→new]``.
``--output FILE`` writes JSON Lines, one object per example, with token strings (padding
removed): language modeling ``id, input, input_noised, target, target_noised``; translation
``id, source, source_noised, prev_output, prev_output_noised, target, target_noised``.
"""

import json
import logging
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

import fairseq_noising.fairseq_plugin  # noqa: F401  (registers with fairseq)
from fairseq import options, tasks
from fairseq.data import data_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from ..data.noised_dataset import NoisedDataset
from ..errors import NoisingError
from ..tasks.noising_config import check_data_dir
from ..tasks.noised_language_modeling import NoisedLanguageModelingTask

PREVIEW_TASKS = ("noised_language_modeling", "noised_translation")
PLUGIN_DIR = os.path.dirname(os.path.abspath(fairseq_noising.__file__))
BATCH_EXAMPLES = 64  # examples per collated batch (the noise does not depend on it)
MAX_SHOWN_TOKENS = 60  # tokens of one sequence printed in the examples


# --------------------------------------------------------------------------------------------
# command line


USAGE = (
    "fairseq-noise-preview DATA [--task noised_language_modeling|noised_translation] "
    "--noise-scheme S --noise-gamma G [--seed N] [--epoch E] [--split SPLIT] [task options] "
    "[--output FILE [--force]] [--max-examples K] [--show-examples N] [--top N]"
)


def add_preview_args(parser):
    group = parser.add_argument_group("Preview")
    group.add_argument(
        "--split", metavar="SPLIT", default=None,
        help="split to preview (default: --train-subset, i.e. train); another split is noised "
        "as if it were the training subset, with its own statistics",
    )
    group.add_argument(
        "--epoch", metavar="E", type=int, default=1,
        help="training epoch (from 1) whose noise to show (default: 1)",
    )
    group.add_argument(
        "--output", metavar="FILE", default=None,
        help="write every processed example, clean and noised, as JSON Lines to FILE",
    )
    group.add_argument("--force", action="store_true", help="overwrite an existing --output FILE")
    group.add_argument(
        "--max-examples", metavar="K", type=int, default=None,
        help="process only the first K examples (default: all)",
    )
    group.add_argument(
        "--show-examples", metavar="N", type=int, default=3,
        help="number of examples printed with their changes marked (default: 3)",
    )
    group.add_argument(
        "--top", metavar="N", type=int, default=10,
        help="number of most frequent replacement tokens listed per side (default: 10)",
    )
    return group


def get_preview_parser():
    parser = options.get_parser("Preview", default_task="noised_language_modeling")
    parser.description = (
        "Shows the data noising that fairseq-train would apply with the same options "
        "(seed, epoch, task, scheme), without training."
    )
    parser.usage = USAGE
    options.add_dataset_args(parser)
    add_preview_args(parser)
    parser.set_defaults(user_dir=PLUGIN_DIR)

    def error(message):  # one line, like the plugin's other errors, instead of the long usage
        raise NoisingError(f"{message} (see fairseq-noise-preview --help)")

    parser.error = error
    return parser


def parse_args(argv=None):
    parser = get_preview_parser()
    args = options.parse_args_and_arch(parser, input_args=argv)
    check_args(args)
    return args


def check_args(args) -> None:
    """One-line errors for the mistakes caught before any data is read."""
    if args.task not in PREVIEW_TASKS:
        raise NoisingError(
            f"--task {args.task} cannot be previewed; use one of {', '.join(PREVIEW_TASKS)}"
        )
    data_dir = check_data_dir(getattr(args, "data", None))
    if args.epoch < 1:
        raise NoisingError(f"--epoch must be at least 1, got {args.epoch}")
    if args.max_examples is not None and args.max_examples < 1:
        raise NoisingError(f"--max-examples must be at least 1, got {args.max_examples}")
    if args.show_examples < 0:
        raise NoisingError(f"--show-examples must not be negative, got {args.show_examples}")
    if args.top < 0:
        raise NoisingError(f"--top must not be negative, got {args.top}")
    if args.output is not None:
        check_output(args.output, args.force)
    if args.task == "noised_translation" and (args.source_lang is None or args.target_lang is None):
        if None in data_utils.infer_language_pair(data_dir):
            raise NoisingError(
                f"cannot infer the language pair from {data_dir}: pass --source-lang and "
                "--target-lang"
            )
    # the previewed split is loaded as the training subset, so it is noised as in training
    args.split_is_train_subset = args.split in (None, args.train_subset)
    args.split = args.split or args.train_subset
    args.train_subset = args.split


def check_output(path: str, force: bool) -> None:
    if os.path.isdir(path):
        raise NoisingError(f"--output {path} is a directory, not a file")
    if os.path.lexists(path) and not force:
        raise NoisingError(f"output file {path} already exists; pass --force to overwrite it")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise NoisingError(f"cannot write --output {path}: directory {directory} does not exist")


# --------------------------------------------------------------------------------------------
# what is read from a batch


@dataclass
class Column:
    """One sequence of a batch: where it sits and which noise details describe it."""

    name: str  # "input", "target", "source", "prev_output"
    path: tuple  # keys leading to the tensor in a collated batch
    dictionary: object
    side: str  # key of the noise details ("target" or "source")
    role: str  # "context" or "target" inside the side's NoisedTokens


def columns_for(task) -> List[Column]:
    if isinstance(task, NoisedLanguageModelingTask):
        return [
            Column("input", ("net_input", "src_tokens"), task.source_dictionary, "target", "context"),
            Column("target", ("target",), task.target_dictionary, "target", "target"),
        ]
    return [
        Column("source", ("net_input", "src_tokens"), task.source_dictionary, "source", "context"),
        Column(
            "prev_output", ("net_input", "prev_output_tokens"), task.target_dictionary, "target",
            "context",
        ),
        Column("target", ("target",), task.target_dictionary, "target", "target"),
    ]


def _get(batch, path):
    value = batch
    for key in path:
        value = value[key]
    return value.numpy()


# --------------------------------------------------------------------------------------------
# statistics


@dataclass
class SideStats:
    label: str
    context_name: str
    target_name: Optional[str]
    gamma: np.ndarray
    noise_target: bool
    specials: List[str] = field(default_factory=list)  # never noised, drawn or replaced
    positions: int = 0
    fired: int = 0
    changed: int = 0
    expected: float = 0.0
    targets: int = 0
    targets_replaced: int = 0
    context_counts: np.ndarray = field(default=None)
    target_counts: np.ndarray = field(default=None)

    def __post_init__(self):
        size = self.gamma.shape[0]
        self.context_counts = np.zeros(size, dtype=np.int64)
        self.target_counts = np.zeros(size, dtype=np.int64)

    def _bincount(self, tokens):
        tokens = tokens[tokens < self.gamma.shape[0]]
        return np.bincount(tokens, minlength=self.gamma.shape[0])

    def add(self, pad, clean_context, details, clean_target=None):
        mask = clean_context != pad
        in_vocab = clean_context < self.gamma.shape[0]
        gamma = np.where(in_vocab, self.gamma[np.where(in_vocab, clean_context, 0)], 0.0)
        fired = details.fired & mask
        self.positions += int(mask.sum())
        self.fired += int(fired.sum())
        self.changed += int((mask & (details.context != clean_context)).sum())
        self.expected += float(gamma[mask].sum())
        self.context_counts += self._bincount(details.context[fired])
        if self.noise_target and clean_target is not None and details.target_replaced is not None:
            replaced = details.target_replaced & (clean_target != pad)
            self.targets += int((clean_target != pad).sum())
            self.targets_replaced += int(replaced.sum())
            self.target_counts += self._bincount(details.target[replaced])

    def summary(self) -> Dict:
        share = lambda n, d: n / d if d else 0.0  # noqa: E731
        return {
            "positions": self.positions,
            "noised": self.fired,
            "noised_fraction": share(self.fired, self.positions),
            "expected_fraction": share(self.expected, self.positions),
            "changed_fraction": share(self.changed, self.positions),
            "targets": self.targets,
            "targets_replaced": self.targets_replaced,
            "targets_replaced_fraction": share(self.targets_replaced, self.targets),
        }


def _top(counts: np.ndarray, dictionary, k: int):
    if k <= 0 or not counts.any():
        return []
    order = np.argsort(-counts, kind="stable")[:k]
    return [(dictionary[int(i)], int(counts[i])) for i in order if counts[i] > 0]


# --------------------------------------------------------------------------------------------
# the preview


def load_task(args):
    """The task and the previewed split, built the way fairseq-train builds them."""
    with warnings.catch_warnings():  # hydra's deprecation notices about fairseq's own configs
        warnings.simplefilter("ignore")
        cfg = convert_namespace_to_omegaconf(args)
    try:
        task = tasks.setup_task(cfg.task)
        # fairseq-train loads the training subset with combine=True and, with several data
        # directories, the directory of the epoch
        task.load_dataset(args.split, epoch=args.epoch, combine=True)
    except FileNotFoundError as e:  # fairseq's own checks (a dictionary, a split)
        if e.filename:
            raise NoisingError(f"{e.filename} is missing (expected fairseq-preprocess output)")
        raise NoisingError(" ".join(str(e).split()) or "a data file is missing")
    dataset = task.dataset(args.split)
    if isinstance(dataset, NoisedDataset):
        dataset.set_epoch(args.epoch)
    return task, dataset


def _noisers(task, wrapper) -> Dict:
    if wrapper is None:
        return {}
    if wrapper.layout == "lm":
        return {"target": wrapper.noiser}
    return {
        side: noiser
        for side, noiser in (("source", wrapper.source_noiser), ("target", wrapper.target_noiser))
        if noiser is not None
    }


class Preview:
    def __init__(self, args, task, dataset):
        self.args = args
        self.task = task
        self.wrapper = dataset if isinstance(dataset, NoisedDataset) else None
        self.clean = dataset.dataset if self.wrapper is not None else dataset
        self.columns = columns_for(task)
        self.is_lm = self.columns[0].name == "input"
        self.symbols = {
            id(c.dictionary): np.asarray(list(c.dictionary.symbols), dtype=object)
            for c in self.columns
        }
        self.sides: Dict[str, SideStats] = {}
        for side, noiser in _noisers(task, self.wrapper).items():
            context = next(c for c in self.columns if c.side == side and c.role == "context")
            target = next((c for c in self.columns if c.side == side and c.role == "target"), None)
            label = "lm" if self.is_lm else side
            self.sides[side] = SideStats(
                label=label,
                context_name=context.name,
                target_name=None if target is None else target.name,
                gamma=noiser.scheme.gamma,
                noise_target=noiser.scheme.noise_target and target is not None,
                specials=[context.dictionary[i] for i in noiser.scheme.special_ids],
            )
        self.items_are_batches = callable(getattr(self.clean, "example_ids", None))
        self.items = 0
        self.examples = 0
        self.shown: List[Dict] = []

    def _strings(self, column, array, mask):
        lengths = mask.sum(axis=1)
        table = self.symbols[id(column.dictionary)]
        flat = array[mask]
        flat = np.where(flat < len(table), flat, column.dictionary.unk())
        return [piece.tolist() for piece in np.split(table[flat], np.cumsum(lengths)[:-1])]

    def run(self, out=None):
        """Collates the items in order, noises each batch and records its examples."""
        limit = self.args.max_examples
        # items are examples, except in datasets whose items are whole batches of rows (those
        # that name the rows' example ids, as --stateful-bptt's): collate those one at a time
        per_collate = 1 if self.items_are_batches else BATCH_EXAMPLES
        for start in range(0, len(self.clean), per_collate):
            if limit is not None and self.examples >= limit:
                break
            items = range(start, min(len(self.clean), start + per_collate))
            if limit is not None and per_collate > 1:
                items = items[: limit - self.examples]
            batch = self.clean.collater([self.clean[i] for i in items])
            self.items += len(items)
            if not batch:
                continue
            if self.wrapper is not None:
                noised, details = self.wrapper.noise_batch(batch, self.args.epoch)
            else:
                noised, details = batch, {}
            keep = None if limit is None else limit - self.examples
            self._add_batch(batch, noised, details, out, keep)
        return self.examples

    def _add_batch(self, batch, noised, details, out, keep=None):
        batch_ids = batch["id"].numpy()
        # rows in id order (translation collaters sort by length), without the padding rows a
        # collater may append (--pad-to-fixed-bsz), and at most ``keep`` of them
        rows = np.argsort(batch_ids, kind="stable")[:keep]
        records = [{"id": int(i)} for i in batch_ids[rows]]
        clean_arrays = {}
        for column in self.columns:
            clean = _get(batch, column.path)[rows]
            noisy = _get(noised, column.path)[rows]
            clean_arrays[column.name] = clean
            mask = clean != column.dictionary.pad()  # the noise never creates nor removes padding
            for suffix, array in (("", clean), ("_noised", noisy)):
                for record, tokens in zip(records, self._strings(column, array, mask)):
                    record[column.name + suffix] = tokens
        for side, stats in self.sides.items():
            if side not in details:
                continue
            context = next(c for c in self.columns if c.name == stats.context_name)
            target = clean_arrays.get(stats.target_name) if stats.target_name else None
            stats.add(
                context.dictionary.pad(), clean_arrays[stats.context_name],
                _rows(details[side], rows), target,
            )
        self.examples += len(records)
        for record in records:
            if len(self.shown) < self.args.show_examples:
                self.shown.append(record)
            if out is not None:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")

    # ----------------------------------------------------------------------------------------
    # printing

    def summary(self) -> Dict:
        return {side: stats.summary() for side, stats in self.sides.items()}

    def print_summary(self, file=sys.stdout):
        args = self.args
        gammas = f"gamma_0 {args.noise_gamma}"
        if not self.is_lm:
            for side in ("source", "target"):
                value = getattr(args, f"noise_gamma_{side}", None)
                if value is not None:
                    gammas += f", {side} {value}"
        split = args.split
        if not getattr(args, "split_is_train_subset", True):
            split += " (noised as if it were the training subset, with its own statistics)"
        if self.items_are_batches:
            count = (
                f"{self.examples:,} examples (the rows of {self.items:,} of "
                f"{len(self.clean):,} batches)"
            )
        else:
            count = f"{self.examples:,} of {len(self.clean):,} examples"
        print(
            f"{args.task} on {args.data}, split {split}: {count}; "
            f"scheme {args.noise_scheme}, {gammas}, "
            f"seed {args.seed}, epoch {args.epoch}",
            file=file,
        )
        if not self.sides:
            print("no noise: the scheme is none or no side is noised", file=file)
        order = ["target"] if self.is_lm else ["source", "target"]
        for side in order if self.sides else []:
            stats = self.sides.get(side)
            if stats is None:
                print(f"[{side}] not noised (--noise-side {args.noise_side})", file=file)
                continue
            s = stats.summary()
            print(
                f"[{stats.label}] context ({stats.context_name}): {s['noised_fraction']:.2%} of "
                f"{s['positions']:,} positions noised (expected {s['expected_fraction']:.2%} "
                f"from gamma; {s['changed_fraction']:.2%} changed token)",
                file=file,
            )
            if stats.noise_target:
                print(
                    f"[{stats.label}] targets ({stats.target_name}): "
                    f"{s['targets_replaced_fraction']:.2%} of {s['targets']:,} positions replaced",
                    file=file,
                )
            print(
                f"[{stats.label}] special, never noised, drawn or replaced: "
                f"{' '.join(stats.specials)}"
                + ("" if "</s>" in stats.specials else " (</s> is an ordinary word)"),
                file=file,
            )
            context = next(c for c in self.columns if c.name == stats.context_name)
            tops = [(stats.context_name, stats.context_counts, context.dictionary)]
            if stats.noise_target:
                target = next(c for c in self.columns if c.name == stats.target_name)
                tops.append((stats.target_name, stats.target_counts, target.dictionary))
            for name, counts, dictionary in tops:
                top = _top(counts, dictionary, args.top)
                if top:
                    listed = ", ".join(f"{token} ({count:,})" for token, count in top)
                    print(f"[{stats.label}] top replacements in {name}: {listed}", file=file)
        if self.shown:
            print("examples ([old→new] marks a changed token):", file=file)
        width = max(len(c.name) for c in self.columns)
        for record in self.shown:
            print(f"  id {record['id']}", file=file)
            for column in self.columns:
                line = _marked(record[column.name], record[column.name + "_noised"])
                print(f"    {column.name:<{width}}  {line}", file=file)


def _rows(details, rows):
    """The noise details of the batch rows ``rows`` (an index array), in that order."""
    pick = lambda a: None if a is None else a[rows]  # noqa: E731
    return type(details)(
        pick(details.context), pick(details.target), pick(details.fired), pick(details.target_replaced)
    )


def _marked(clean: List[str], noised: List[str]) -> str:
    shown = []
    for old, new in zip(clean[:MAX_SHOWN_TOKENS], noised[:MAX_SHOWN_TOKENS]):
        shown.append(old if old == new else f"[{old}→{new}]")
    if len(clean) > MAX_SHOWN_TOKENS:
        shown.append(f"… (+{len(clean) - MAX_SHOWN_TOKENS} tokens)")
    return " ".join(shown)


# --------------------------------------------------------------------------------------------
# entry points


def main(argv=None, stdout=None) -> Dict:
    """Runs the preview; returns the per-side summary for programmatic use.

    The summary maps each noised side, named as in ``NoisedDataset.noise_batch``'s details
    (language modeling: ``"target"``, printed ``[lm]``; translation: ``"source"``, ``"target"``), to
    counts and fractions: ``positions``, ``noised``, ``noised_fraction``, ``expected_fraction``
    (mean gamma over the context positions), ``changed_fraction``, ``targets``,
    ``targets_replaced`` and ``targets_replaced_fraction``.
    """
    stdout = stdout or sys.stdout
    args = parse_args(argv)
    task, dataset = load_task(args)
    preview = Preview(args, task, dataset)
    if args.output is None:
        preview.run()
    else:
        _run_to_file(preview, args.output, args.force)
    preview.print_summary(stdout)
    if args.output is not None:
        print(f"wrote {preview.examples:,} examples to {args.output}", file=stdout)
    return preview.summary()


def _run_to_file(preview, path, force):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".preview.", suffix=".jsonl.tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            preview.run(out)
        if not force and os.path.lexists(path):
            raise NoisingError(f"output file {path} already exists; pass --force to overwrite it")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; give it normal rights
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def cli_main():
    # fairseq's imports switch the root logger to INFO; the preview prints its own summary
    logging.getLogger().setLevel(logging.WARNING)
    try:
        main()
    except BrokenPipeError:  # e.g. piped into head
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    cli_main()
