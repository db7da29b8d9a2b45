"""The console scripts ``fairseq-noise-preview`` and ``fairseq-noise-analyze``."""

from .. import fairseq_plugin  # noqa: F401  (registers the whole plugin, whatever came first)
