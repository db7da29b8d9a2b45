"""Figure 1 of a results page: training and validation perplexity per epoch, none against kn."""

import os
from typing import Dict, List, Optional

from ...analysis.logs import lowered_at
from .markdown import picked_rows


def figure_1(
    groups: Dict[str, List[Dict]], png: str, lm: bool, plateau: Optional[float] = None
) -> List[str]:
    """none against kn, every seed of the gamma_0 the table chose (before any row of the key
    is evaluated: its row with the lowest validation so far), one pair of curves each."""
    runs, halved = {}, {}
    for key in ("none", "kn"):
        rows = [r for r in groups.get(key, []) if r["training"]["valid_ppl"]]
        if not rows:
            return []
        picked = picked_rows(rows, plateau) or [
            min(rows, key=lambda r: min(v for v in r["training"]["valid_ppl"].values() if v))
        ]
        for row in sorted(picked, key=lambda r: r.get("seed") or 0):
            t = row["training"]
            label = key if key == "none" else f"kn gamma_0 {row['gamma']:g}"
            label += f" seed {row.get('seed')}" if len(picked) > 1 else ""
            runs[label] = tuple(
                {int(e): p for e, p in t[s].items() if p is not None}
                for s in ("train_ppl", "valid_ppl")
            )
            lr = {int(e): r for e, r in (t.get("train_lr") or {}).items() if r is not None}
            halved[label] = lowered_at(lr)
    from ...analysis import plots  # matplotlib: only when drawing

    plots.curves(runs, png, halved=halved)
    what = "Figure 1 of the paper" if lm else "As the paper's Figure 1, for translation"
    kn = "bigram Kneser-Ney noising" if lm else "bigram Kneser-Ney noising on both sides"
    return [
        f"{what}: training (dashed; kn's on noised data) and validation perplexity",
        f"per epoch, unnoised against {kn} (every seed of the gamma_0 in the table);",
        "a triangle marks the first epoch at each halved learning rate.",
        "",
        f"![training and validation curves]({os.path.basename(png)})",
        "",
    ]
