"""The noised tasks, registered with fairseq on import."""

from . import noised_language_modeling, noised_translation  # noqa: F401
