"""The paper's figures beside which the recipes' results pages put ours, and the row labels.

Row labels come from the scheme registry (:data:`fairseq_noising.schemes.REGISTRY`); a translation
row ``kn:source`` is the scheme's label with ", source only".
"""

from dataclasses import dataclass, field
from typing import Dict, Tuple

from fairseq_noising.schemes import REGISTRY


@dataclass(frozen=True)
class Table:
    """One results page: its recipe, title, notes (``{data}``, ``{stats}`` and the recipe's
    settings may appear in both) and the paper's figures per row (language models: validation
    and test perplexity; translation: perplexity and BLEU)."""

    recipe: str
    kind: str  # "lm" or "translation"
    title: str
    notes: str
    paper: Dict[str, Tuple[float, float]] = field(default_factory=dict)


_PTB_NOTES = (
    "Data: {data}.{extra} The paper's rows: none = dropout only; every scheme is combined with the "
    "SIZE's dropout. Paper references: Zaremba et al. (2014) 82.2 / 78.4 (large)."
)
# Table 4 of the paper (IWSLT'15 En-De): perplexity, BLEU
IWSLT_TABLE_4 = {
    "none": (8.84, 24.6),
    "blank": (8.28, 25.3),
    "unigram": (8.15, 25.5),
    "kn": (7.92, 26.0),
    "kn:source": (8.74, 24.8),
    "kn:target": (8.14, 25.6),
}
TABLES: Dict[str, Table] = {
    "ptb-small": Table(
        "ptb.sh",
        "lm",
        "Penn Treebank, small model (paper Table 2)",
        _PTB_NOTES.replace("{extra}", " The paper reports no small model (its columns are empty)."),
    ),
    "ptb-medium": Table(
        "ptb.sh",
        "lm",
        "Penn Treebank, medium model (paper Table 2)",
        _PTB_NOTES.replace("{extra}", ""),
        {"none": (84.3, 80.4), "blank": (82.7, 78.8), "unigram": (83.1, 80.1), "kn": (79.9, 76.9)},
    ),
    "ptb-large": Table(
        "ptb.sh",
        "lm",
        "Penn Treebank, large model (paper Table 2)",
        _PTB_NOTES.replace("{extra}", ""),
        {"none": (81.6, 77.5), "blank": (79.4, 75.5), "unigram": (79.4, 76.1), "kn": (76.2, 73.4)},
    ),
    "text8": Table(
        "text8.sh",
        "lm",
        "Text8, {HIDDEN}-unit model without dropout (paper Table 3)",
        "Data: {data} split at characters {TRAIN_CHARS} / +{VALID_CHARS} / +{TEST_CHARS}, words "
        "seen <= {MIN_COUNT} times in train -> `<unk>`, {WORDS_PER_LINE} words per line (each line "
        "ends with `</s>`). The paper reports 15.3M / 848K / 855K tokens and a 42K vocabulary; "
        "ours: {stats}. The paper does not list its gamma_0 values.",
        {
            "none": (94.3, 123.6),
            "blank": (85.0, 110.7),
            "unigram": (85.2, 111.3),
            "kn": (84.5, 110.6),
        },
    ),
    "iwslt15": Table(
        "iwslt15_en_de.sh",
        "translation",
        "IWSLT'15 En-De (paper Table 4)",
        "Data: {data} (valid = {VALID_SET}, test = {TEST_SET}). The paper gives its gamma_0 values "
        'per row only as "selected on the validation set"; its BLEU is presumably tokenized BLEU '
        "(compare with tok BLEU).",
        IWSLT_TABLE_4,
    ),
    "multi30k": Table(
        "multi30k.sh",
        "translation",
        "Multi30k En-De (the translation pipeline of Table 4 on a small corpus)",
        "Data: {data} (valid = val, test = test2016). The paper's columns are its IWSLT'15 figures "
        "(Table 4), not comparable numbers.",
        IWSLT_TABLE_4,
    ),
}

PROTOCOL = {
    "lm": "Perplexities from stateful evaluation of checkpoint_best.pt (the whole split read as one "
    "stream, state carried across 35-token blocks). gamma_0 chosen per scheme on validation.",
    "translation": "Perplexity: fairseq-validate on the validation set with checkpoint_best.pt (per "
    "target token, `</s>` included). BLEU: sacrebleu (13a) on test, detokenized hypotheses against "
    "the raw references; tok BLEU: sacrebleu --tokenize none, tokenized hypotheses against the "
    "tokenized references (word-level only). gamma_0 chosen per row on validation perplexity.",
}

SIDES = {"both": "", "source": ", source only", "target": ", target only"}


def row_label(row: str) -> str:
    """The table label of a row: the scheme's registry label (plus the side for ``kn:source``)."""
    scheme, _, side = row.partition(":")
    return REGISTRY[scheme].label + SIDES[side or "both"]


# Table 6 of the paper (PTB validation, medium models whose full perplexities are near-identical):
# perplexity of the last token where the bigram / trigram never occurs in training; the paper
# counts 15062 such bigram and 43051 such trigram occurrences
UNSEEN_TABLE_6 = {"none": (2881.0, 381.0), "blank": (2760.0, 372.0), "unigram": (2612.0, 365.0)}
UNSEEN_COUNTS = (15062, 43051)
