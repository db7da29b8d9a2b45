"""fairseq-noising: data noising as smoothing (Xie et al., ICLR 2017) for fairseq.

Load with ``--user-dir fairseq_noising`` (or the installed package's directory). Importing the
package registers the tasks, models and schedulers, and allow-lists the contents of fairseq
checkpoints for torch's safe loader (torch >= 2.6 loads with ``weights_only=True``).
"""

from . import checkpoint_safety

checkpoint_safety.allow_fairseq_checkpoints()

from . import models, optim, tasks  # noqa: E402,F401  (registration side effects)

__version__ = "0.1.0"
