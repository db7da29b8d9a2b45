"""What ``--user-dir fairseq_noising`` registers with fairseq.

Importing this module allow-lists the contents of fairseq checkpoints for torch's safe loader
(torch >= 2.6 loads with ``weights_only=True``) and registers the tasks, models and the
``paper_halving`` scheduler. Code that uses the plugin from Python imports it explicitly.
"""

from . import checkpoint_safety

checkpoint_safety.allow_fairseq_checkpoints()

from . import models, optim, tasks  # noqa: E402,F401  (registration side effects)
