#!/usr/bin/env bash
# Sets up everything on a fresh machine: a virtual environment in .venv with torch, fairseq
# (ve-fairseq on Python >= 3.11) and this plugin installed in editable mode.
#
#   bash recipes/setup.sh            # then use .venv/bin/fairseq-train --user-dir fairseq_noising
#
# Environment: PYTHON (default python3), VENV (default .venv), TORCH_SPEC (default torch==2.13.0;
# an already installed torch is kept). Set TORCH_SPEC to the build you want (for example a CUDA
# build) before the first run.
#
# For a machine without internet, two more modes (tools/wheelhouse.py does the work):
#
#   bash recipes/setup.sh --build-wheelhouse DIR [--python-version 3.12]
#        [--platform manylinux_2_28_x86_64] [--with-torch torch==2.13.0 | --with-torch FILE.whl]
#        [--target-has FILE]
#     (online) puts every wheel the plugin needs except torch (and torchaudio, which fairseq
#     needs only for speech tasks) into DIR, for that Python (default: PYTHON's) and platform,
#     with a manifest DIR/wheelhouse.json; --with-torch adds that exact torch and its needs;
#     --target-has leaves out what the target has (FILE: its pip list --format=freeze).
#   bash recipes/setup.sh --from-wheelhouse DIR [--python PY | --over PY]
#     (offline) pip install --no-index from DIR into the environment of PY, a path or a command
#     (python3 of a machine image that is a virtual environment with its own CUDA torch), or of
#     VENV (created if missing), keeping the torch already there; --over PY: VENV is made over
#     PY's environment (it sees PY's packages, its torch; PY's environment is left as it is).
#     Checks DIR against that Python first and stops with one line (a missing or damaged wheel,
#     another Python version or platform, no torch anywhere).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

case "${1:-}" in
  --help|-h)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 0 ;;
  # paths stay relative to the caller's directory; VENV relative to the repository
  --build-wheelhouse)
    shift
    exec "$PYTHON" "$ROOT/tools/wheelhouse.py" build "$@" ;;
  --from-wheelhouse)
    shift
    case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
    exec "$PYTHON" "$ROOT/tools/wheelhouse.py" install --venv "$VENV" "$@" ;;
  "") ;;
  *)
    echo "setup.sh: unknown option '$1' (see bash recipes/setup.sh --help)" >&2
    exit 2 ;;
esac

cd "$ROOT"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  pip install "$TORCH_SPEC"
fi
pip install -e ".[test]"
"$VENV/bin/python" -c "import fairseq, fairseq_noising, torch; print(f'fairseq-noising ready: torch {torch.__version__}, fairseq {fairseq.__version__}')"
