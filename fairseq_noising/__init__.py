"""fairseq-noising: data noising as smoothing (Xie et al., ICLR 2017) for fairseq.

The mathematics (``ngram_stats``, ``schemes``, ``noiser``, ``analysis``) needs numpy alone
(``analysis`` also torch and matplotlib), works in any training loop, and importing it changes
nothing global in the interpreter. Importing a fairseq-side sub-package (``tasks``, ``models``,
``optim``, ``data``) registers what it holds with fairseq and allow-lists fairseq checkpoints for
torch's safe loader. When fairseq loads the package (``--user-dir fairseq_noising``: fairseq
imports it by its folder name), or the package is imported after fairseq, importing it runs
:mod:`.fairseq_plugin`: all of the above, plus, only in fairseq's own commands, the one-line error
hook and the gloo teardown.
"""

import sys

__version__ = "0.1.0"

if "fairseq" in sys.modules:
    from . import fairseq_plugin  # noqa: F401  (registration; hooks in fairseq's commands)
