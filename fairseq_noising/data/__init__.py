"""fairseq datasets that noise and batch for the plugin's tasks.

Nothing here registers with fairseq (the tasks build these datasets). Like every fairseq-side
sub-package, importing it allow-lists fairseq checkpoints for torch's safe loader
(:mod:`..checkpoint_safety`); like them, it does not import :mod:`..fairseq_plugin`: registration
flows one way, from the plugin to the sub-packages.
"""

from .. import checkpoint_safety

checkpoint_safety.allow_fairseq_checkpoints()
