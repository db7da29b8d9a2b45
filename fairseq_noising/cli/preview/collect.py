"""The preview's pass over a split: each batch collated, noised as in training, and counted."""

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ...data.noised_dataset import NoisedDataset
from ...tasks.noised_language_modeling import NoisedLanguageModelingTask

BATCH_EXAMPLES = 64  # examples per collated batch (the noise does not depend on it)


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
            Column(
                "input", ("net_input", "src_tokens"), task.source_dictionary, "target", "context"
            ),
            Column("target", ("target",), task.target_dictionary, "target", "target"),
        ]
    return [
        Column("source", ("net_input", "src_tokens"), task.source_dictionary, "source", "context"),
        Column(
            "prev_output",
            ("net_input", "prev_output_tokens"),
            task.target_dictionary,
            "target",
            "context",
        ),
        Column("target", ("target",), task.target_dictionary, "target", "target"),
    ]


def _get(batch, path):
    value = batch
    for key in path:
        value = value[key]
    return value.numpy()


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


def _noisers(task, wrapper) -> Dict:
    return {} if wrapper is None else dict(wrapper.noisers)


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
                context.dictionary.pad(),
                clean_arrays[stats.context_name],
                _rows(details[side], rows),
                target,
            )
        self.examples += len(records)
        for record in records:
            if len(self.shown) < self.args.show_examples:
                self.shown.append(record)
            if out is not None:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")

    def summary(self) -> Dict:
        return {side: stats.summary() for side, stats in self.sides.items()}


def _rows(details, rows):
    """The noise details of the batch rows ``rows`` (an index array), in that order."""
    pick = lambda a: None if a is None else a[rows]  # noqa: E731
    return type(details)(
        pick(details.context),
        pick(details.target),
        pick(details.fired),
        pick(details.target_replaced),
    )
