#!/usr/bin/env bash
# IWSLT'15 English-German translation, Section 4.2 / Table 4 of the paper: a 2-layer LSTM
# encoder-decoder with 512 units, dot attention, input feeding, dropout 0.2, reversed source,
# uniform [-0.1, 0.1] init, batch 128, SGD lr 1.0, clip 5, lr halved once an epoch improves
# validation perplexity by less than 1% (paper_halving --halving-threshold 0.01). One model per
# noising row (none blank unigram kn, plus kn on the source only and on the target only) and gamma_0;
# gamma_0 chosen on validation perplexity. TED tst2012 is the validation set, tst2014 the test set;
# top-50K word vocabularies per language. Test BLEU with sacrebleu on detokenized output against
# the raw references. Writes $RESULTS_DIR/iwslt15.md (iwslt15-spm.md with --spm) beside Table 4.
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
#   ARCH          default noising_lstm_iwslt_en_de; HIDDEN DROPOUT LAYERS override its values
#   BATCH_SIZE    default 128; MAX_EPOCH default 50; HALVINGS default 8; BEAM default 5; SEED 1
#   NWORDS        words per language (default 50000); TOKENIZER auto | moses | simple
#   SPM_VOCAB SPM_JOINT   with --spm: pieces per model (default 16000), 1 for one joint model
#   EXTRA_ARGS    more fairseq-train flags; GEN_ARGS more fairseq-generate flags
#   WORK          working folder (default runs/iwslt15); finished steps are skipped on a rerun,
#                 unfinished training resumes from checkpoint_last.pt
#   RESULTS_DIR   where iwslt15.md goes (default results/)
#   DEVICE        cpu | cuda (default: cuda when torch sees a GPU, else --cpu)
#   VENV          the environment made by recipes/setup.sh (default .venv)
# Options: --spm sentencepiece (unigram) instead of word vocabularies, one model per language
# (SPM_JOINT=1: joint), output detokenized by sentencepiece before scoring;
# --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
NAME=iwslt15_en_de.sh
SPM=${SPM:-0}
source "$ROOT/recipes/_common.sh"
parse_options "--spm" "$@"
WORK=$(realpath -m "${WORK:-runs/iwslt15}")
RESULTS_DIR=${RESULTS_DIR:-$ROOT/results}
IWSLT_URL=${IWSLT_URL:-https://wit3.fbk.eu/archive/2015-01/texts/de/en/de-en.tgz}
VALID_SET=${VALID_SET:-tst2012}
TEST_SET=${TEST_SET:-tst2014}

check_env
detect_device

# 1. data
if [ -n "${IWSLT_TGZ:-}" ]; then
  [ -e "$IWSLT_TGZ" ] || die "IWSLT_TGZ=$IWSLT_TGZ does not exist"
  IWSLT_TGZ=$(realpath "$IWSLT_TGZ")
else
  IWSLT_TGZ="$WORK/$(basename "$IWSLT_URL")"
  fetch "$IWSLT_URL" "$IWSLT_TGZ" "Get the IWSLT 2015 En-De texts release (de-en.tgz, from https://wit3.fbk.eu/2015-01) yourself and set IWSLT_TGZ to it."
fi
RAW="$WORK/raw"
fresh_step "$RAW" "$PY" "$ROOT/recipes/prepare_translation.py" iwslt --tarball "$IWSLT_TGZ" --outdir "$RAW" \
  --src en --tgt de --valid "$VALID_SET" --test "$TEST_SET"

SUFFIX=""; [ "$SPM" = 1 ] && SUFFIX=-spm
OUT="$RESULTS_DIR/iwslt15$SUFFIX.md"
TITLE="IWSLT'15 En-De (paper Table 4)"
NOTES="Data: $IWSLT_TGZ (valid = $VALID_SET, test = $TEST_SET). The paper gives its gamma_0 values per row only as \"selected on the validation set\"; its BLEU is presumably tokenized BLEU (compare with tok BLEU)."
declare -A PAPER_PPL=([none]=8.84 [blank]=8.28 [unigram]=8.15 [kn]=7.92 [kn:source]=8.74 [kn:target]=8.14)
declare -A PAPER_BLEU=([none]=24.6 [blank]=25.3 [unigram]=25.5 [kn]=26.0 [kn:source]=24.8 [kn:target]=25.6)

source "$ROOT/recipes/_translation.sh"
