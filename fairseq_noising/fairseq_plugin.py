"""What ``--user-dir fairseq_noising`` runs: the whole plugin, and in fairseq's commands the hooks.

It imports the sub-packages that register with fairseq; what it installs, where, and why nothing
imports it back: docs/layout.md, "What importing the package changes".
"""

from . import errors, fairseq_compat, models, optim, tasks  # noqa: F401  (the last three register)

if fairseq_compat.running_fairseq_command():
    errors.install_excepthook()
    fairseq_compat.leave_gloo_group_at_exit()
