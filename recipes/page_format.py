"""The Markdown of the results pages: a table, and the mark of an empty cell."""

from typing import List, Optional, Sequence

NONE = "—"  # an empty cell


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> List[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def fmt(value: Optional[float]) -> str:
    """One of our figures: two decimals."""
    return NONE if value is None else f"{value:.2f}"


def paper_value(value: Optional[float]) -> str:
    """One of the paper's figures, as printed there."""
    return NONE if value is None else f"{value:g}"
