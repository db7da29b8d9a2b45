"""Word tokenizers of the translation recipes, and the detokenizers that undo them before BLEU:
sacremoses (Moses' rules, no XML escaping), or a dependency-free regular-expression fallback."""

import re
from typing import List

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
