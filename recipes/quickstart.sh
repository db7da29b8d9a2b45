#!/usr/bin/env bash
# Quick start: an LSTM language model on Penn Treebank without noising (none) and with bigram
# Kneser-Ney noising (kn, gamma_0 0.2), side by side, the paper's protocol (stateful BPTT, SGD lr 1,
# clip 5, halve and restore on a non-improving epoch), then a table of valid/test perplexities and
# Figure 1 (recipes/config/quickstart.yaml). On a GPU: the medium model, the whole protocol; on a
# CPU: the small model, 5 epochs.
#
#   bash recipes/setup.sh && PTB_DIR=/path/to/ptb bash recipes/quickstart.sh [OVERRIDE...]
#
# Writes WORK/results.md and WORK/results-curves.png. A cut-off run resumes when started again.
# Environment: PTB_DIR (default: downloaded into WORK), WORK (default runs/quickstart), VENV.
# OVERRIDEs go to fairseq-hydra-train, e.g. model=lm_medium optimization.max_epoch=10.
set -euo pipefail
cd "$(dirname "$0")/.."
source recipes/_sweep.sh
WORK=${WORK:-runs/quickstart}

# 1. data: PTB_DIR's text files, else downloaded into WORK/ptb; binarized into WORK/data-bin
ptb_data

# 2. none and kn side by side; each evaluates its checkpoint_best.pt on valid and test (every
#    token with its whole left context) and rewrites the page
DEVICE=()
if ! "$BIN/python" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  DEVICE=(model=lm_small optimization.max_epoch=5)
fi
sweep quickstart "$WORK" "$WORK/results.md" "task.data=$WORK/data-bin" "${DEVICE[@]}" "$@"
