"""The console scripts ``fairseq-noise-preview`` and ``fairseq-noise-analyze``.

Not a registering sub-package: ``curves`` and ``sweep`` read logs without loading fairseq; the
modules that load models import :mod:`fairseq_noising.fairseq_plugin` themselves.
"""
