"""The paper's learning-rate protocol, registered with fairseq on import."""

from .. import fairseq_plugin  # noqa: F401  (registers the whole plugin, whatever came first)
from . import paper_halving  # noqa: F401
