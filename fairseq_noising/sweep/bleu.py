"""Words in and out of a translation pipeline, and BLEU: the tokenizers of the translation recipes
(sacremoses, or a simple regular-expression fallback) with their detokenizers, and sacrebleu's
score of detokenized hypotheses against the raw references (plus tokenized BLEU against the
tokenized references)."""

import re
from typing import Dict, List, Optional

from ..errors import NoisingError

SIMPLE_TOKEN = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")
NO_SPACE_BEFORE = set(".,!?;:%)]}'’”»")
NO_SPACE_AFTER = set("([{$“«¿¡")


def simple_tokenize(line: str) -> str:
    return " ".join(SIMPLE_TOKEN.findall(line))


def simple_detokenize(line: str) -> str:
    """Undoes simple_tokenize approximately: no space before closing punctuation, after opening
    brackets, around "-", and inside pairs of straight double quotes."""
    out, in_quote = "", False
    for tok in line.split():
        if tok == '"':
            out += tok if (in_quote or not out) else " " + tok
            in_quote = not in_quote
            continue
        glue = (
            not out
            or tok in NO_SPACE_BEFORE
            or out[-1] in NO_SPACE_AFTER
            or tok == "-"
            or out.endswith("-")
            or (in_quote and out.endswith('"'))
        )
        out += tok if glue else " " + tok
    return out


def resolve_tokenizer(name: str) -> str:
    """``moses`` (sacremoses) or ``simple``: ``auto`` is moses when sacremoses is installed."""
    if name in ("auto", "moses"):
        try:
            import sacremoses  # noqa: F401

            return "moses"
        except ImportError:
            if name == "moses":
                raise NoisingError("tokenizer moses needs sacremoses (pip install sacremoses)")
            return "simple"
    return name


def tokenize(lines: List[str], lang: str, tokenizer: str) -> List[str]:
    if resolve_tokenizer(tokenizer) == "moses":
        from sacremoses import MosesTokenizer

        mt = MosesTokenizer(lang=lang)
        return [mt.tokenize(line, escape=False, return_str=True) for line in lines]
    return [simple_tokenize(line) for line in lines]


def detokenize(lines: List[str], lang: str, tokenizer: str) -> List[str]:
    """``tokenizer`` none: the lines as they are (fairseq already detokenized sentencepiece)."""
    kind = resolve_tokenizer(tokenizer)
    if kind == "none":
        return list(lines)
    if kind == "moses":
        from sacremoses import MosesDetokenizer

        md = MosesDetokenizer(lang=lang)
        return [md.detokenize(line.split()) for line in lines]
    return [simple_detokenize(line) for line in lines]


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
