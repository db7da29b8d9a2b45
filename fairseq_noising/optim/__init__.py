"""The paper's learning-rate protocol, registered with fairseq on import.

Like every fairseq-side sub-package, importing it also allow-lists fairseq checkpoints for torch's
safe loader (:mod:`..checkpoint_safety`): the scheduler reads the best checkpoint back. It does not
import :mod:`..fairseq_plugin`: registration flows one way, from the plugin to the sub-packages.
"""

from .. import checkpoint_safety
from . import paper_halving  # noqa: F401  (@register_lr_scheduler)

checkpoint_safety.allow_fairseq_checkpoints()
