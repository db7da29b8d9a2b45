#!/usr/bin/env bash
# Text8, Table 3 of the paper: the first 90M characters train, the next 5M validate, the last 5M
# test; words seen 10 or fewer times in train become <unk>; lines of 1000 words. Then the rows of
# recipes/config/text8.yaml (the 512-unit LSTM without dropout: none, and blank, unigram and kn at
# two gamma_0 each) side by side with the paper's protocol, then the page.
#
#   bash recipes/setup.sh && TEXT8=/path/to/text8.zip bash recipes/text8.sh [OVERRIDE...]
#
# Environment: TEXT8 (text8 or text8.zip; default: downloaded into WORK), WORK (default runs/text8),
# RESULTS_DIR, MPS=1, VENV. OVERRIDEs as in ptb.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source recipes/_sweep.sh
WORK=${WORK:-runs/text8}

# 1. data: split, <unk>, lines (recipes/prepare_text8.py)
if [ -z "${TEXT8:-}" ]; then
  TEXT8=$WORK/text8.zip
  [ -f "$TEXT8" ] || curl -fsSL --create-dirs -o "$TEXT8" http://mattmahoney.net/dc/text8.zip ||
    die "could not download text8.zip: set TEXT8 to its path"
fi
[ -f "$TEXT8" ] || die "TEXT8=$TEXT8 does not exist"
[ -f "$WORK/text/test.txt" ] || "$BIN/python" recipes/prepare_text8.py --input "$TEXT8" --outdir "$WORK/text"

# 2. binarize
if [ ! -f "$WORK/data-bin/dict.txt" ]; then
  "$BIN/fairseq-preprocess" --only-source --trainpref "$WORK/text/train.txt" --validpref "$WORK/text/valid.txt" \
    --testpref "$WORK/text/test.txt" --destdir "$WORK/data-bin" --workers 2
fi

# 3. the table
sweep text8 "$WORK/text8" "${RESULTS_DIR:-results}/text8.md" "task.data=$WORK/data-bin" "$@"
