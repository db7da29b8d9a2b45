"""The figures of ``fairseq-noise-analyze`` (matplotlib, PNG files).

Figures are built with :class:`matplotlib.figure.Figure`, not pyplot, and written by matplotlib's
Agg renderer: importing this module leaves the caller's matplotlib backend and pyplot's figures
(a notebook's, say) as they were.
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple

import matplotlib.ticker
from matplotlib.figure import Figure


def _subplots(figsize):
    fig = Figure(figsize=figsize)
    return fig, fig.subplots()


def _save(fig, path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def _bar_pairs(labels, first, second, names, ylabel, path, log=False) -> str:
    """Two bars per model (``names`` labels the pair), one figure."""
    fig, ax = _subplots((max(4.0, 1.2 * len(labels) + 2), 3.5))
    xs = range(len(labels))
    width = 0.38
    ax.bar([x - width / 2 for x in xs], first, width, label=names[0])
    ax.bar([x + width / 2 for x in xs], second, width, label=names[1])
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.legend()
    return _save(fig, path)


def kl_bars(
    labels: Sequence[str], uniform: Sequence[float], unigram: Sequence[float], path: str
) -> str:
    """Figure 3: mean KL to the uniform and unigram distributions, one bar pair per model."""
    return _bar_pairs(
        labels, uniform, unigram, ("uniform", "unigram"), "mean KL divergence (nats)", path
    )


def unseen_bars(labels, bigram_ppl, trigram_ppl, path: str) -> str:
    """Table 6 as a figure: perplexity of the last token of unseen bigrams and trigrams."""
    return _bar_pairs(
        labels,
        bigram_ppl,
        trigram_ppl,
        ("unseen bigrams", "unseen trigrams"),
        "perplexity of the last token",
        path,
        log=True,
    )


def sweep_lines(series: Dict[str, List[Tuple[float, float]]], path: str) -> str:
    """Figure 2: validation perplexity against gamma_0, one line per scheme.

    Runs without noising (scheme ``none``) are drawn as a horizontal dashed baseline (the best).
    """
    fig, ax = _subplots((5, 3.5))
    for scheme, points in sorted(series.items()):
        points = sorted(points)
        if scheme == "none":
            ax.axhline(min(p for _, p in points), ls="--", color="k", lw=1, label="none")
            continue
        ax.plot([g for g, _ in points], [p for _, p in points], marker="o", label=scheme)
    ax.set_xlabel(r"$\gamma_0$")
    ax.set_ylabel("validation perplexity")
    ax.legend()
    return _save(fig, path)


def curves_figure(
    runs: Dict[str, Tuple[Dict[int, float], Dict[int, float]]],
    halved: Optional[Dict[str, List[int]]] = None,
) -> Figure:
    """Figure 1: training (dashed) and validation (solid) perplexity per epoch, per run; every
    point marked (an epoch alone is a point), whole epochs on the x axis. ``halved``: per run,
    the epochs trained at a halved learning rate's start, marked on its validation curve."""
    fig, ax = _subplots((5.5, 3.8))
    epochs = []
    marked = False
    for i, (label, (train, valid)) in enumerate(runs.items()):
        color = f"C{i % 10}"
        for series, ls, marker, what in ((train, "--", "s", "train"), (valid, "-", "o", "valid")):
            es = sorted(series)
            epochs += es
            if es:
                ys = [series[e] for e in es]
                ax.plot(es, ys, ls=ls, marker=marker, ms=4, color=color, label=f"{label} {what}")
        at = [e for e in (halved or {}).get(label, []) if e in valid]
        if at:
            ax.plot(
                at,
                [valid[e] for e in at],
                ls="none",
                marker="v",
                ms=9,
                mfc="none",
                color=color,
                label=None if marked else "first epoch at a halved rate",
            )
            marked = True
    ax.set_xlabel("epoch")
    # whole epochs even when there is one (integer=True alone falls back to fractions then)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, min_n_ticks=1))
    if epochs:
        ax.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)
    ax.set_ylabel("perplexity")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    return fig


def curves(
    runs: Dict[str, Tuple[Dict[int, float], Dict[int, float]]],
    path: str,
    halved: Optional[Dict[str, List[int]]] = None,
) -> str:
    """Figure 1 (:func:`curves_figure`) written to ``path``."""
    return _save(curves_figure(runs, halved), path)


def pseudocount_scatter(expected, observed, path: str, title: str = "") -> str:
    fig, ax = _subplots((4.2, 4.0))
    ax.loglog(expected, observed, ".", ms=2, alpha=0.5)
    lo = max(min(expected.min(), observed[observed > 0].min() if (observed > 0).any() else 1), 1e-3)
    hi = max(expected.max(), observed.max())
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.set_xlabel("expected pseudocount (formula)")
    ax.set_ylabel("empirical mean pseudocount")
    if title:
        ax.set_title(title, fontsize=9)
    return _save(fig, path)
