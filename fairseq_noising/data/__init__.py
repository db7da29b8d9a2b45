"""fairseq datasets that noise and batch for the plugin's tasks.

Like every fairseq-side sub-package, importing it registers the whole plugin with fairseq
(:mod:`fairseq_noising.fairseq_plugin`), whatever was imported first.
"""

from .. import fairseq_plugin  # noqa: F401
