"""The noised tasks, registered with fairseq on import.

Like every fairseq-side sub-package, importing it also allow-lists fairseq checkpoints for torch's
safe loader (:mod:`..checkpoint_safety`), so a process that sets up the tasks loads their
checkpoints with ``weights_only=True``. It does not import :mod:`..fairseq_plugin`: registration
flows one way, from the plugin to the sub-packages.
"""

from .. import checkpoint_safety
from . import noised_language_modeling, noised_translation  # noqa: F401  (@register_task)

checkpoint_safety.allow_fairseq_checkpoints()
