"""The paper's LSTM models, registered with fairseq on import.

Like every fairseq-side sub-package, importing it also allow-lists fairseq checkpoints for torch's
safe loader (:mod:`..checkpoint_safety`), so a process that uses the models loads their
checkpoints with ``weights_only=True``. It does not import :mod:`..fairseq_plugin`: registration
flows one way, from the plugin to the sub-packages.
"""

from .. import checkpoint_safety
from . import noising_lstm_lm, noising_lstm_seq2seq  # noqa: F401  (@register_model)

checkpoint_safety.allow_fairseq_checkpoints()
