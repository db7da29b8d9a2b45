"""What ``--user-dir fairseq_noising`` registers with fairseq.

Importing this module allow-lists the contents of fairseq checkpoints for torch's safe loader
(torch >= 2.6 loads with ``weights_only=True``) and registers the tasks, models and the
``paper_halving`` scheduler; a gloo process group is destroyed before the interpreter shuts down
(:func:`.fairseq_compat.leave_gloo_group_at_exit`); an uncaught :class:`~.errors.NoisingError`
ends ``fairseq-train``, ``fairseq-eval-lm`` and fairseq's other commands with its one line
(:func:`.errors.install_excepthook`). It runs when fairseq imports the package
(``--user-dir``), when the package is imported after fairseq, and when any fairseq-side
sub-package (``data``, ``tasks``, ``models``, ``optim``) is imported. A process that imported
only the mathematics before handing over to fairseq in-process imports this module itself.
"""

from . import checkpoint_safety, errors, fairseq_compat

checkpoint_safety.allow_fairseq_checkpoints()
fairseq_compat.leave_gloo_group_at_exit()
errors.install_excepthook()

from . import models, optim, tasks  # noqa: E402,F401  (registration side effects)
