"""fairseq-noising: data noising as smoothing (Xie et al., ICLR 2017) for fairseq.

The mathematics (``ngram_stats``, ``schemes``, ``noiser``, ``analysis``) needs numpy alone and
works in any training loop. When fairseq loads the package (``--user-dir fairseq_noising``), or
fairseq is already imported, importing it also registers the tasks, models and scheduler
(:mod:`.fairseq_plugin`).
"""

import sys

__version__ = "0.1.0"

if "fairseq" in sys.modules:
    from . import fairseq_plugin  # noqa: F401  (registration side effects)
