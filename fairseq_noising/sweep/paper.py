"""The paper's figures, beside which a sweep's results page puts ours, and the rows' labels.

A table is named by the sweep's ``hydra.callbacks.row.table`` (``ptb-medium``, ``multi30k``, ...);
row labels come from the scheme registry (:data:`fairseq_noising.schemes.REGISTRY`), a translation
row ``kn:source`` being the scheme's label with ", source only".
"""

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from ..schemes import REGISTRY


@dataclass(frozen=True)
class Table:
    """One results page: its kind (``lm``: validation and test perplexity; ``translation``:
    validation perplexity and test BLEU), title, a note on the data, and the paper's figures per
    row key (``kn``, ``kn:source``)."""

    kind: str
    title: str
    note: str = ""
    paper: Dict[str, Tuple[float, float]] = field(default_factory=dict)


_PTB = "The paper's rows: none = dropout only; every scheme is combined with the model's dropout."
# Table 4 of the paper (IWSLT'15 En-De): perplexity, BLEU
IWSLT_TABLE_4 = {
    "none": (8.84, 24.6),
    "blank": (8.28, 25.3),
    "unigram": (8.15, 25.5),
    "kn": (7.92, 26.0),
    "kn:source": (8.74, 24.8),
    "kn:target": (8.14, 25.6),
}
OTHER_CORPUS = (
    "The paper's columns are its IWSLT'15 En-De figures (Table 4), another corpus: for orientation, "
    "not comparable numbers."
)
TABLES: Dict[str, Table] = {
    "quickstart": Table("lm", "Quick start: none against kn on Penn Treebank", _PTB),
    "ptb-small": Table("lm", "Penn Treebank, small model", _PTB + " The paper has no small model."),
    "ptb-medium": Table(
        "lm",
        "Penn Treebank, medium model (paper Table 2)",
        _PTB,
        {"none": (84.3, 80.4), "blank": (82.7, 78.8), "unigram": (83.1, 80.1), "kn": (79.9, 76.9)},
    ),
    "ptb-large": Table(
        "lm",
        "Penn Treebank, large model (paper Table 2)",
        _PTB + " Zaremba et al. (2014): 82.2 / 78.4.",
        {"none": (81.6, 77.5), "blank": (79.4, 75.5), "unigram": (79.4, 76.1), "kn": (76.2, 73.4)},
    ),
    "text8": Table(
        "lm",
        "Text8, 512-unit model without dropout (paper Table 3)",
        "The paper does not list its gamma_0 values.",
        {
            "none": (94.3, 123.6),
            "blank": (85.0, 110.7),
            "unigram": (85.2, 111.3),
            "kn": (84.5, 110.6),
        },
    ),
    "iwslt15": Table(
        "translation",
        "IWSLT'15 En-De (paper Table 4)",
        "The paper's BLEU is presumably tokenized BLEU (compare with tok BLEU).",
        IWSLT_TABLE_4,
    ),
    "multi30k": Table(
        "translation", "Multi30k En-De, the paper's LSTM", OTHER_CORPUS, IWSLT_TABLE_4
    ),
    "multi30k-cpu": Table(
        "translation", "Multi30k En-De at CPU scale (Table 4's rows)", OTHER_CORPUS, IWSLT_TABLE_4
    ),
    "multi30k-transformer": Table(
        "translation", "Multi30k En-De, a Transformer (beyond the paper)", OTHER_CORPUS
    ),
}
SIDES = {"both": "", "source": ", source only", "target": ", target only"}


def table(name: Optional[str], kind: str) -> Table:
    """The named table, or an untitled one of that kind (a sweep of the user's own)."""
    return TABLES.get(name or "", Table(kind, name or "a noising sweep"))


def row_label(key: str) -> str:
    """The label of a row key: the scheme's registry label (plus the side for ``kn:source``)."""
    scheme, _, side = key.partition(":")
    return REGISTRY[scheme].label + SIDES[side or "both"]


def row_order(key: str) -> tuple:
    """Rows as the paper orders them: by scheme in registry order (none first), then side."""
    scheme, _, side = key.partition(":")
    schemes = list(REGISTRY)
    return (
        schemes.index(scheme) if scheme in schemes else len(schemes),
        list(SIDES).index(side or "both"),
    )


# Table 6 of the paper (PTB validation, medium models): perplexity of the last token where the
# bigram / trigram never occurs in training; the paper counts 15062 and 43051 such occurrences
UNSEEN_TABLE_6 = {"none": (2881.0, 381.0), "blank": (2760.0, 372.0), "unigram": (2612.0, 365.0)}
UNSEEN_COUNTS = (15062, 43051)
