#!/usr/bin/env bash
# IWSLT'15 English-German, Table 4 of the paper: TED tst2012 validates, tst2014 tests; Moses tokens
# with the 50K most frequent words per language (or SPM=1 sentencepiece); the rows of
# recipes/config/iwslt15.yaml (the paper's LSTM encoder-decoder and SGD protocol: none, blank,
# unigram, kn, kn source only, kn target only, two gamma_0 each) side by side, each validated,
# decoded with beam 5 and scored with sacrebleu, then the page.
#
#   bash recipes/setup.sh && IWSLT_TGZ=/path/to/de-en.tgz bash recipes/iwslt15_en_de.sh [OVERRIDE...]
#
# Data: the IWSLT 2015 texts release (de-en.tgz, https://wit3.fbk.eu/2015-01): train.tags files
# minus their metadata lines, the <seg> elements of the tst2012 and tst2014 XML files.
# Environment: IWSLT_TGZ (the tarball or its extracted folder; default: downloaded from IWSLT_URL),
# WORK (default runs/iwslt15), RESULTS_DIR, NWORDS, SPM SPM_VOCAB SPM_JOINT, MPS=1, VENV.
set -euo pipefail
cd "$(dirname "$0")/.."
source recipes/_sweep.sh
WORK=${WORK:-runs/iwslt15}
IWSLT_URL=${IWSLT_URL:-https://wit3.fbk.eu/archive/2015-01/texts/de/en/de-en.tgz}

# 1. data: the raw pairs
if [ -z "${IWSLT_TGZ:-}" ]; then
  IWSLT_TGZ=$WORK/de-en.tgz
  [ -f "$IWSLT_TGZ" ] || curl -fsSL --create-dirs -o "$IWSLT_TGZ" "$IWSLT_URL" ||
    die "could not download $IWSLT_URL: get the IWSLT 2015 En-De texts release yourself and set IWSLT_TGZ"
fi
[ -e "$IWSLT_TGZ" ] || die "IWSLT_TGZ=$IWSLT_TGZ does not exist"
[ -f "$WORK/raw/test.de" ] || "$BIN/python" recipes/prepare_translation.py iwslt --tarball "$IWSLT_TGZ" --outdir "$WORK/raw" \
  --src en --tgt de --valid tst2012 --test tst2014

# 2. tokens or pieces, binarized
translation_data "$WORK/raw"

# 3. the table: every row trains, evaluates itself and rewrites the page
sweep iwslt15 "$WORK/iwslt15" "${RESULTS_DIR:-results}/iwslt15.md" "${DATA_OVERRIDES[@]}" "$@"
