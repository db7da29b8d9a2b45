"""The noised tasks, registered with fairseq on import."""

from .. import fairseq_plugin  # noqa: F401  (registers the whole plugin, whatever came first)
from . import noised_language_modeling, noised_translation  # noqa: F401
