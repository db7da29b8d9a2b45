"""What ``fairseq-noise-preview`` prints: the noising rates per side and marked examples."""

import sys
from typing import List

import numpy as np

MAX_SHOWN_TOKENS = 60  # tokens of one sequence printed in the examples


def print_summary(preview, file=sys.stdout):
    print(_headline(preview), file=file)
    if not preview.sides:
        print("no noise: the scheme is none or no side is noised", file=file)
    for side in (["target"] if preview.is_lm else ["source", "target"]) if preview.sides else []:
        stats = preview.sides.get(side)
        if stats is None:
            print(f"[{side}] not noised (--noise-side {preview.args.noise_side})", file=file)
        else:
            for line in _side_lines(preview, stats):
                print(line, file=file)
    if preview.shown:
        print("examples ([old→new] marks a changed token):", file=file)
    width = max(len(c.name) for c in preview.columns)
    for record in preview.shown:
        print(f"  id {record['id']}", file=file)
        for column in preview.columns:
            line = _marked(record[column.name], record[column.name + "_noised"])
            print(f"    {column.name:<{width}}  {line}", file=file)


def _headline(preview) -> str:
    args = preview.args
    gammas = f"gamma_0 {args.noise_gamma}"
    if not preview.is_lm:
        for side in ("source", "target"):
            value = getattr(args, f"noise_gamma_{side}", None)
            if value is not None:
                gammas += f", {side} {value}"
    split = args.split
    if not getattr(args, "split_is_train_subset", True):
        split += " (noised as if it were the training subset, with its own statistics)"
    if preview.items_are_batches:
        count = (
            f"{preview.examples:,} examples (the rows of {preview.items:,} of "
            f"{len(preview.clean):,} batches)"
        )
    else:
        count = f"{preview.examples:,} of {len(preview.clean):,} examples"
    return (
        f"{args.task} on {args.data}, split {split}: {count}; "
        f"scheme {args.noise_scheme}, {gammas}, seed {args.seed}, epoch {args.epoch}"
    )


def _side_lines(preview, stats) -> List[str]:
    s = stats.summary()
    lines = [
        f"[{stats.label}] context ({stats.context_name}): {s['noised_fraction']:.2%} of "
        f"{s['positions']:,} positions noised (expected {s['expected_fraction']:.2%} "
        f"from gamma; {s['changed_fraction']:.2%} changed token)"
    ]
    if stats.noise_target:
        lines.append(
            f"[{stats.label}] targets ({stats.target_name}): "
            f"{s['targets_replaced_fraction']:.2%} of {s['targets']:,} positions replaced"
        )
    lines.append(
        f"[{stats.label}] special, never noised, drawn or replaced: {' '.join(stats.specials)}"
        + ("" if "</s>" in stats.specials else " (</s> is an ordinary word)")
    )
    dictionaries = {c.name: c.dictionary for c in preview.columns}
    tops = [(stats.context_name, stats.context_counts)]
    if stats.noise_target:
        tops.append((stats.target_name, stats.target_counts))
    for name, counts in tops:
        top = _top(counts, dictionaries[name], preview.args.top)
        if top:
            listed = ", ".join(f"{token} ({count:,})" for token, count in top)
            lines.append(f"[{stats.label}] top replacements in {name}: {listed}")
    return lines


def _top(counts: np.ndarray, dictionary, k: int):
    if k <= 0 or not counts.any():
        return []
    order = np.argsort(-counts, kind="stable")[:k]
    return [(dictionary[int(i)], int(counts[i])) for i in order if counts[i] > 0]


def _marked(clean: List[str], noised: List[str]) -> str:
    shown = [
        old if old == new else f"[{old}→{new}]"
        for old, new in zip(clean[:MAX_SHOWN_TOKENS], noised[:MAX_SHOWN_TOKENS])
    ]
    if len(clean) > MAX_SHOWN_TOKENS:
        shown.append(f"… (+{len(clean) - MAX_SHOWN_TOKENS} tokens)")
    return " ".join(shown)
