#!/usr/bin/env bash
# Multi30k En-De (WMT16 multimodal task 1: 29,000 / 1,014 / 1,000 pairs) through Table 4's
# pipeline: Moses tokens (or SPM=1 sentencepiece), the rows of recipes/config/$CONFIG.yaml side by
# side, each validated, decoded with beam 5 and scored with sacrebleu against the raw test2016
# references, then the page. CONFIG: multi30k (default: the paper's 2 x 512 LSTM and SGD protocol),
# multi30k_cpu (the same protocol at 256 units: a CPU budget).
#
#   bash recipes/setup.sh && CONFIG=multi30k_cpu bash recipes/multi30k.sh [OVERRIDE...]
#
# Environment: MULTI30K_DIR (train/val/test .en/.de; default ../shared/data/multi30k beside the
# repository when it is there, else downloaded), CONFIG, WORK (default runs/multi30k), RESULTS_DIR
# (default results), NWORDS, SPM SPM_VOCAB SPM_JOINT, MPS=1, TIME_BUDGET, EVAL_RESERVE, VENV,
# DATA_ONLY=1 (prepare WORK/{raw,tok,data-bin} and stop; with them there, nothing is downloaded).
# OVERRIDEs as in ptb.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source recipes/_sweep.sh
CONFIG=${CONFIG:-multi30k}
WORK=${WORK:-runs/multi30k}
URL=https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw

# 1. data, and the raw pairs without each file's extra empty last line
if [ -z "${MULTI30K_DIR:-}" ] && [ -f ../shared/data/multi30k/train.en ]; then MULTI30K_DIR=../shared/data/multi30k; fi
if [ -z "${MULTI30K_DIR:-}" ] && [ ! -f "$WORK/raw/test.de" ]; then
  MULTI30K_DIR=$WORK/multi30k
  for f in train.en train.de val.en val.de test_2016_flickr.en test_2016_flickr.de; do
    [ -f "$MULTI30K_DIR/${f/_2016_flickr/}.gz" ] || curl -fsSL --create-dirs -o "$MULTI30K_DIR/${f/_2016_flickr/}.gz" "$URL/$f.gz" ||
      die "could not download $f.gz: set MULTI30K_DIR to a folder with train, val and test .en/.de"
  done
fi
[ -f "$WORK/raw/test.de" ] || "$BIN/python" recipes/prepare_translation.py plain --indir "$MULTI30K_DIR" --outdir "$WORK/raw" \
  --src en --tgt de --split train=train --split valid=val --split test=test

# 2. tokens or pieces, binarized
translation_data "$WORK/raw"

# 3. the table: every row trains, evaluates itself and rewrites the page
sweep "$CONFIG" "$WORK/$CONFIG" "${RESULTS_DIR:-results}/${CONFIG//_/-}.md" "${DATA_OVERRIDES[@]}" "$@"
