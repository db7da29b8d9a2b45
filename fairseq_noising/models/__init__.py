"""The paper's LSTM models, registered with fairseq on import."""

from .. import fairseq_plugin  # noqa: F401  (registers the whole plugin, whatever came first)
from . import noising_lstm_lm, noising_lstm_seq2seq  # noqa: F401
