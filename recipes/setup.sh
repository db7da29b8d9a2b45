#!/usr/bin/env bash
# Sets up everything on a fresh machine: a virtual environment in .venv with torch, fairseq
# (ve-fairseq on Python >= 3.11) and this plugin installed in editable mode.
#
#   bash recipes/setup.sh            # then use .venv/bin/fairseq-train --user-dir fairseq_noising
#
# Environment: PYTHON (default python3), VENV (default .venv), TORCH_SPEC (default torch==2.13.0;
# an already installed torch is kept). Set TORCH_SPEC to the build you want (for example a CUDA
# build) before the first run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  pip install "$TORCH_SPEC"
fi
pip install -e ".[test]"
"$VENV/bin/python" -c "import fairseq, fairseq_noising, torch; print(f'fairseq-noising ready: torch {torch.__version__}, fairseq {fairseq.__version__}')"
