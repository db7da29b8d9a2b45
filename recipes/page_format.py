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


def duration(seconds: Optional[float], seconds_below: float = 60) -> str:
    """``45 s`` below seconds_below, else ``12 min`` or ``2 h 05 min``."""
    if seconds is None:
        return NONE
    if seconds < seconds_below:
        return f"{seconds:.0f} s"
    hours, minutes = divmod(int(round(seconds / 60.0)), 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"
