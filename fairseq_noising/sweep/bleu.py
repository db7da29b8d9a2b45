"""Words in and out of a translation pipeline, and BLEU: the tokenizers of the translation recipes
(sacremoses, or a simple regular-expression fallback) with their detokenizers, and sacrebleu's
score of detokenized hypotheses against the raw references (plus tokenized BLEU against the
tokenized references)."""

from typing import Dict, List, Optional

from ..data_prep.tokenizers import detokenize
from ..errors import NoisingError


def read_lines(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    while lines and lines[-1] == "":  # a file's trailing empty lines are no sentences
        lines.pop()
    return lines


def corpus_bleu(
    hyps: List[str], refs: List[str], tokenize: str = "13a", lowercase: bool = False
) -> Dict[str, object]:
    """``{"score": BLEU, "signature": sacrebleu's signature}``."""
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(refs):
        raise NoisingError(f"{len(hyps)} hypotheses for {len(refs)} references")
    metric = BLEU(tokenize=tokenize, lowercase=lowercase)
    return {
        "score": metric.corpus_score(hyps, [refs]).score,
        "signature": str(metric.get_signature()),
    }


def score(
    hyps: List[str],
    reference: str,
    lang: str,
    tokenizer: str,
    detok_out: str,
    tok_reference: Optional[str] = None,
    lowercase: bool = False,
) -> Dict[str, Dict[str, object]]:
    """BLEU (sacrebleu 13a on the detokenized hypotheses, also written to ``detok_out``, against
    the raw references) and, with ``tok_reference``, tok BLEU (tokenized against tokenized);
    ``lowercase``: both case-insensitive (sacrebleu's ``case:lc``)."""
    detok = detokenize(hyps, lang, tokenizer)
    with open(detok_out, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in detok))
    scores = {"bleu": corpus_bleu(detok, read_lines(reference), lowercase=lowercase)}
    if tok_reference:
        scores["tok_bleu"] = corpus_bleu(hyps, read_lines(tok_reference), "none", lowercase)
    return scores
