"""The paper's learning-rate protocol, registered with fairseq on import."""

from . import paper_halving  # noqa: F401
