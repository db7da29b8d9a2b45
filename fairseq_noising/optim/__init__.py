"""The paper's learning-rate protocol, registered with fairseq on import.

Importing it also ends fairseq's ``Trainer.load_checkpoint`` with the protocol's hook (a no-op
under other schedulers: :func:`.best_params.on_load_checkpoint`), and, like every fairseq-side
sub-package, allow-lists fairseq checkpoints for torch's safe loader (:mod:`..checkpoint_safety`):
the hook reads the best checkpoint back. It does not import :mod:`..fairseq_plugin`: registration
flows one way, from the plugin to the sub-packages.
"""

from .. import checkpoint_safety, fairseq_compat
from . import best_params, paper_halving  # noqa: F401  (@register_lr_scheduler)

checkpoint_safety.allow_fairseq_checkpoints()
fairseq_compat.end_load_checkpoint_with(best_params.on_load_checkpoint)
