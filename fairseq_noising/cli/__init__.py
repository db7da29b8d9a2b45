"""The console scripts ``fairseq-noise-preview`` and ``fairseq-noise-analyze``.

Not a registering sub-package: ``curves`` and ``sweep`` read logs without loading fairseq (``sweep``
allow-lists fairseq checkpoints when it reads one); the modules that load tasks and models import
:mod:`fairseq_noising.tasks` and :mod:`fairseq_noising.models` themselves. A NoisingError ends
these scripts with its one line through :func:`fairseq_noising.errors.exit_on_error`: they install
no hook.
"""
