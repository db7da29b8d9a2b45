"""What ``--user-dir fairseq_noising`` runs: the whole plugin, and in fairseq's commands the hooks.

Importing it imports the fairseq-side sub-packages, each of which registers its part with fairseq
and allow-lists fairseq checkpoints for torch's safe loader (``weights_only=True``, torch >= 2.6):
the tasks (:mod:`.tasks`), the models (:mod:`.models`) and the ``paper_halving`` scheduler
(:mod:`.optim`). In one of fairseq's commands (:func:`.fairseq_compat.running_fairseq_command`:
``fairseq-train``, ``fairseq-eval-lm``, ``fairseq-generate``, ...) it also installs what belongs
to a whole program: the hook that ends it on an uncaught :class:`~.errors.NoisingError` with its
one line (:func:`.errors.install_excepthook`), and the teardown of a gloo process group before the
interpreter shuts down (:func:`.fairseq_compat.leave_gloo_group_at_exit`). Any other process (a
notebook, a sweep driver, a test) keeps its hooks: there a NoisingError is an ordinary ValueError.

The package's ``__init__`` imports this module when fairseq is already imported, which is how
``--user-dir`` runs it. Registration flows one way: nothing in the package imports this module
back. A process that imported part of the package before fairseq (``--user-dir`` then skips the
package) and runs fairseq in-process imports it, or the sub-packages it needs, itself.
"""

from . import errors, fairseq_compat, models, optim, tasks  # noqa: F401  (the last three register)

if fairseq_compat.running_fairseq_command():
    errors.install_excepthook()
    fairseq_compat.leave_gloo_group_at_exit()
