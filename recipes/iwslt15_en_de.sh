#!/usr/bin/env bash
# IWSLT'15 English-German translation, Section 4.2 / Table 4 of the paper: a 2-layer LSTM
# encoder-decoder with 512 units, dot attention, input feeding, dropout 0.2, reversed source,
# uniform [-0.1, 0.1] init, batch 128, SGD lr 1.0, clip 5, lr halved once an epoch improves
# validation perplexity by less than 1% (paper_halving --halving-threshold 0.01). One model per
# noising row (none blank unigram kn, plus kn on the source only and on the target only) and gamma_0;
# gamma_0 chosen on validation perplexity. TED tst2012 is the validation set, tst2014 the test set;
# top-50K word vocabularies per language. Test BLEU with sacrebleu on detokenized output against
# the raw references. Writes $RESULTS_DIR/iwslt15.md (iwslt15-spm.md with --spm, -ARCH and -adam
# added for an ARCH other than noising_lstm_* and OPTIMIZER=adam) beside Table 4.
#
#   bash recipes/setup.sh && IWSLT_TGZ=/path/to/de-en.tgz bash recipes/iwslt15_en_de.sh
#
# Data: the IWSLT 2015 evaluation campaign's texts release (2015-01), a tarball holding
# train.tags.<pair>.en / .de and IWSLT15.TED.tst2012.<pair>.<lang>.xml / ...tst2014... files
# (<pair> de-en or en-de). Text is taken from the train.tags files minus their metadata lines
# (those starting with "<") and from the <seg> elements of the XML files, then tokenized with
# sacremoses (Moses) when it is installed, else with the simple tokenizer of
# recipes/prepare_translation.py (TOKENIZER=simple forces it).
#
# Environment:
#   IWSLT_TGZ     local tarball (or extracted folder); when unset, IWSLT_URL is downloaded into $WORK
#                 (default https://wit3.fbk.eu/archive/2015-01/texts/de/en/de-en.tgz; WIT3 now
#                 serves the release from https://wit3.fbk.eu/2015-01 and may need a manual download)
#   VALID_SET TEST_SET   default tst2012 and tst2014
#   ROWS          default "none blank unigram kn kn:source kn:target" (scheme or scheme:side)
#   GAMMAS        gamma_0 values tried for every noised row (default "0.1 0.2 0.3"); one run each
#   GAMMAS_<scheme>  the grid of one scheme's rows instead of GAMMAS, e.g. GAMMAS_kn="0.2 0.4"
#   ARCH          default noising_lstm_iwslt_en_de; HIDDEN DROPOUT LAYERS override its values
#                 (HIDDEN, LAYERS: noising_lstm_* only); any fairseq translation architecture
#   OPTIMIZER     sgd (default, the paper's) or adam (a Transformer's); LR WARMUP LABEL_SMOOTHING
#                 PATIENCE: as in recipes/multi30k.sh
#   BATCH_SIZE    default 128; MAX_EPOCH default 50; HALVINGS default 8; BEAM default 5; SEED 1
#   NWORDS        words per language (default 50000); TOKENIZER auto | moses | simple
#   SPM_VOCAB SPM_JOINT   with --spm: pieces per model (default 16000), 1 for one joint model
#   EXTRA_ARGS    more fairseq-train flags; GEN_ARGS more fairseq-generate flags
#   WORK          working folder (default runs/iwslt15); finished steps are skipped on a rerun,
#                 unfinished training resumes from checkpoint_last.pt
#   RESULTS_DIR   where iwslt15.md goes (default results/)
#   DEVICE        cpu | cuda (default: cuda when torch sees a GPU, else --cpu)
#   VENV          the environment made by recipes/setup.sh (default .venv)
#   JOBS THREADS TIME_BUDGET EVAL_RESERVE MPS STATUS_EVERY   how the runs share the machine (below)
# Options: --spm sentencepiece (unigram) instead of word vocabularies, one model per language
# (SPM_JOINT=1: joint), output detokenized by sentencepiece before scoring;
# --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."
source recipes/_common.sh
SPM=${SPM:-0}
parse_options --spm "$@"

IWSLT_URL=${IWSLT_URL:-https://wit3.fbk.eu/archive/2015-01/texts/de/en/de-en.tgz}
VALID_SET=${VALID_SET:-tst2012}
TEST_SET=${TEST_SET:-tst2014}
ROWS=${ROWS:-none blank unigram kn kn:source kn:target}
GAMMAS=${GAMMAS:-0.1 0.2 0.3}
ARCH=${ARCH:-noising_lstm_iwslt_en_de}
BATCH_SIZE=${BATCH_SIZE:-128}
MAX_EPOCH=${MAX_EPOCH:-50}
HALVINGS=${HALVINGS:-8}
OPTIMIZER=${OPTIMIZER:-sgd}
WARMUP=${WARMUP:-4000}
LABEL_SMOOTHING=${LABEL_SMOOTHING:-0.1}
PATIENCE=${PATIENCE:-10}
BEAM=${BEAM:-5}
NWORDS=${NWORDS:-50000}
TOKENIZER=${TOKENIZER:-auto}
SPM_VOCAB=${SPM_VOCAB:-16000}
SPM_JOINT=${SPM_JOINT:-0}
SEED=${SEED:-1}
EXTRA_ARGS=${EXTRA_ARGS:-}
GEN_ARGS=${GEN_ARGS:-}
WORK=$(realpath -m "${WORK:-runs/iwslt15}")
RESULTS_DIR=${RESULTS_DIR:-results}
SETTINGS=(VALID_SET="$VALID_SET" TEST_SET="$TEST_SET"
          ROWS="$ROWS" GAMMAS="$GAMMAS" ARCH="$ARCH" HIDDEN="${HIDDEN:-}" DROPOUT="${DROPOUT:-}"
          LAYERS="${LAYERS:-}" BATCH_SIZE="$BATCH_SIZE" MAX_EPOCH="$MAX_EPOCH" HALVINGS="$HALVINGS"
          OPTIMIZER="$OPTIMIZER" LR="${LR:-}" WARMUP="$WARMUP" LABEL_SMOOTHING="$LABEL_SMOOTHING" PATIENCE="$PATIENCE"
          BEAM="$BEAM" NWORDS="$NWORDS" TOKENIZER="$TOKENIZER" SPM="$SPM" SPM_VOCAB="$SPM_VOCAB"
          SPM_JOINT="$SPM_JOINT" SEED="$SEED" EXTRA_ARGS="$EXTRA_ARGS" GEN_ARGS="$GEN_ARGS"
          "${ROWS_SETTINGS[@]}")
require_venv
check_settings "${SETTINGS[@]}"
DEVICE=$(choose_device "${DEVICE:-auto}")
DEVICE_ARGS=()
if [ "$DEVICE" = cpu ]; then DEVICE_ARGS=(--cpu); fi
translation_names  # MODEL (in run folder names) and PAGE_SUFFIX

# 1. data: the release's texts (IWSLT_TGZ, or a download), then the raw pairs: train.tags minus their
#    metadata lines, the <seg> elements of VALID_SET and TEST_SET
if [ -n "${IWSLT_TGZ:-}" ]; then
  [ -e "$IWSLT_TGZ" ] || die "IWSLT_TGZ=$IWSLT_TGZ does not exist"
else
  IWSLT_TGZ=$WORK/$(basename "$IWSLT_URL")
  fetch "$IWSLT_URL" "$IWSLT_TGZ" \
    "Get the IWSLT 2015 En-De texts release (de-en.tgz, from https://wit3.fbk.eu/2015-01) yourself and set IWSLT_TGZ to it."
fi
IWSLT_TGZ=$(realpath -m "$IWSLT_TGZ")
RAW=$WORK/raw
prepare "$RAW" "$PY" recipes/prepare_translation.py iwslt --tarball "$IWSLT_TGZ" --outdir "$RAW" \
  --src en --tgt de --valid "$VALID_SET" --test "$TEST_SET"

# 2.-4. segment and binarize, train, validate and decode test: the same steps for both translation
#    recipes, in recipes/_translation_steps.sh (PAGE_TABLE and PAGE_DATA: the results page)
PAGE_TABLE=iwslt15 PAGE_DATA=$IWSLT_TGZ
source recipes/_translation_steps.sh

# 5. the results page (our table beside the paper's Table 4, every command), the training logs
#    and the chosen runs' test translations
write_results "${PAGE[@]}" --runs "${RUNS[@]}"
