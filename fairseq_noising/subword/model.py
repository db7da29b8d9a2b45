"""A sentencepiece model as the subword sampler reads it, and the fairseq dictionary of its pieces.

The model type and the piece kinds come from the serialized model (a protobuf message, read here
with a few lines instead of a protobuf dependency); the pieces and scores from sentencepiece.
"""

import os
import re
from typing import List, Sequence, Tuple

import numpy as np

from ..errors import NoisingError

WORD_START = "\u2581"  # sentencepiece's whitespace mark, the first character of a word's piece
UNIGRAM, BPE = 1, 2
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def _varint(blob: bytes, pos: int) -> Tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = blob[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def _fields(blob: bytes):
    """(field number, value) of a protobuf message's varint and length-delimited fields."""
    pos = 0
    while pos < len(blob):
        key, pos = _varint(blob, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(blob, pos)
        elif wire == 2:
            size, pos = _varint(blob, pos)
            value, pos = blob[pos : pos + size], pos + size
        elif wire in (1, 5):  # fixed64, fixed32 (a piece's score): not needed here
            pos += 8 if wire == 1 else 4
            continue
        else:
            raise ValueError(f"protobuf wire type {wire}")
        yield field, value


def read_model_proto(blob: bytes) -> Tuple[int, np.ndarray]:
    """``ModelProto``'s ``trainer_spec.model_type`` and every piece's ``type`` (sentencepiece's
    sentencepiece_model.proto: pieces = 1 {type = 3}, trainer_spec = 2 {model_type = 3})."""
    model_type, kinds = UNIGRAM, []
    for field, value in _fields(blob):
        if field == 1:
            kind = NORMAL
            for f, v in _fields(value):
                kind = v if f == 3 and isinstance(v, int) else kind
            kinds.append(kind)
        elif field == 2:
            for f, v in _fields(value):
                model_type = v if f == 3 and isinstance(v, int) else model_type
    return model_type, np.asarray(kinds, dtype=np.int64)


class SubwordModel:
    """A unigram or BPE sentencepiece model: pieces, scores (log probabilities or merge order),
    kinds; refused with one line when it cannot be sampled from."""

    def __init__(self, path: str, flag: str = "--subword-model"):
        import sentencepiece as spm

        if not os.path.isfile(path):
            raise NoisingError(f"{flag}: sentencepiece model {path} does not exist")
        try:
            sp = spm.SentencePieceProcessor(model_file=path)
            self.model_type, self.kinds = read_model_proto(sp.serialized_model_proto())
        except (RuntimeError, OSError, ValueError, IndexError) as e:
            raise NoisingError(f"{flag}: {path} is not a sentencepiece model ({e})")
        self.path = path
        ids = list(range(sp.get_piece_size()))
        self.pieces: List[str] = sp.id_to_piece(ids)
        self.scores = np.asarray(sp.get_score(ids), dtype=np.float64)
        self.unk_id = sp.unk_id()
        if self.model_type not in (UNIGRAM, BPE):
            name = MODEL_TYPES.get(self.model_type, str(self.model_type))
            raise NoisingError(
                f"{flag}: {path} is a {name} model; subword sampling needs a unigram or BPE model"
            )
        inside = [p for p, k in zip(self.pieces, self.kinds) if k == NORMAL and WORD_START in p[1:]]
        if inside:
            raise NoisingError(
                f"{flag}: {path} has pieces across words (such as {inside[0]!r}: trained with "
                "--split_by_whitespace=false or --treat_whitespace_as_suffix); subword sampling "
                "needs every piece inside one word"
            )

    @property
    def kind(self) -> str:
        return MODEL_TYPES[self.model_type]

    def normal_pieces(self):
        """(id, piece, score) of the pieces segmentations are made of."""
        return [
            (i, p, float(s))
            for i, (p, s, k) in enumerate(zip(self.pieces, self.scores, self.kinds))
            if k == NORMAL
        ]

    def dictionary_symbols(self) -> List[str]:
        """The symbols of the model's fairseq dictionary, in the model's order: every piece but
        ``<unk>``, ``<s>`` and ``</s>`` (fairseq's dictionary has its own)."""
        return [p for p, k in zip(self.pieces, self.kinds) if k not in (UNKNOWN, CONTROL)]

    def write_dictionary(self, path: str) -> None:
        tmp = path + ".part"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(f"{symbol} 1\n" for symbol in self.dictionary_symbols())
        os.replace(tmp, path)

    def map_dictionary(
        self, symbols: Sequence[str], reserved: Sequence[int], unk: int, dict_path: str
    ) -> Tuple[np.ndarray, np.ndarray]:
        """The tables between the dictionary's ids and the model's (-1: none), after checking
        that the dictionary is the model's. ``reserved``: ids that are no pieces (fairseq's
        special symbols, the plugin's ``<blank>``, fairseq's ``madeupword`` padding)."""
        skip = set(int(i) for i in reserved)
        skip |= {i for i, s in enumerate(symbols) if re.fullmatch(r"madeupword\d+", s)}
        ordinary = [(i, s) for i, s in enumerate(symbols) if i not in skip]
        if not any(s.startswith(WORD_START) for _, s in ordinary):
            raise NoisingError(
                f"dictionary {dict_path} holds no sentencepiece pieces (no symbol starts with "
                f"{WORD_START}): subword sampling needs data binarized with a sentencepiece "
                f"model's pieces, such as {self.path}'s"
            )
        index = {p: i for i, p in enumerate(self.pieces)}
        foreign = [s for _, s in ordinary if s not in index]
        if foreign:
            raise NoisingError(
                f"dictionary {dict_path} is not the dictionary of {self.path}: {len(foreign)} of "
                f"its symbols are no pieces of the model (such as {foreign[0]!r})"
            )
        have = {s for _, s in ordinary}
        missing = [p for _, p, _ in self.normal_pieces() if p not in have]
        if missing:
            raise NoisingError(
                f"dictionary {dict_path} lacks {len(missing)} pieces of {self.path} (such as "
                f"{missing[0]!r}): binarize with the model's vocabulary as the dictionary "
                "(fairseq-preprocess --srcdict/--tgtdict; recipes/prepare_translation.py spm-dir "
                "writes it)"
            )
        to_piece = np.full(len(symbols), -1, dtype=np.int64)
        to_dict = np.full(len(self.pieces), -1, dtype=np.int64)
        dict_ids = np.array([i for i, _ in ordinary], dtype=np.int64)
        piece_ids = np.array([index[s] for _, s in ordinary], dtype=np.int64)
        to_piece[dict_ids] = piece_ids
        to_dict[piece_ids] = dict_ids
        to_dict[self.unk_id] = unk
        return to_piece, to_dict
