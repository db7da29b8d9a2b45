#!/usr/bin/env bash
# Text8 language modelling, Section 4.1 / Table 3 of the paper: the 512-unit 2-layer LSTM without
# dropout, one model per noising scheme and gamma_0, same protocol as ptb.sh (stateful BPTT 20 x 35,
# --sentence-avg, SGD lr 1.0, clip 5, paper_halving with 8 halvings, best epoch kept), gamma_0
# chosen on validation, stateful evaluation. Data preparation (recipes/prepare_text8.py): first 90M
# characters train, next 5M valid, last 5M test; words seen 10 or fewer times in train -> <unk>;
# the word stream is broken into lines of WORDS_PER_LINE words (fairseq adds </s> to each line).
# Writes $RESULTS_DIR/text8.md beside the paper's Table 3, with the exact commands.
#
#   bash recipes/setup.sh && bash recipes/text8.sh
#
# Environment:
#   TEXT8          a local text8 or text8.zip; when unset, http://mattmahoney.net/dc/text8.zip is
#                  downloaded into $WORK
#   WORDS_PER_LINE words per line (default 1000)
#   TRAIN_CHARS VALID_CHARS TEST_CHARS  split sizes in characters (default 90000000 5000000 5000000)
#   MIN_COUNT      words seen this often or less in train become <unk> (default 10)
#   SCHEMES        default "none blank unigram kn" (also: ad uniform mkn)
#   GAMMAS         gamma_0 values tried for every noised scheme (default "0.1 0.2 0.3")
#   GAMMAS_<scheme>  the grid of one scheme instead of GAMMAS, e.g. GAMMAS_kn="0.2 0.4"
#   HIDDEN         hidden size (default 512); DROPOUT (default 0, as in the paper)
#   MAX_EPOCH HALVINGS SEED EXTRA_ARGS   as in ptb.sh (defaults 200, 8, 1, "")
#   WORK           working folder (default runs/text8); finished steps are skipped on a rerun,
#                  unfinished training resumes from checkpoint_last.pt
#   RESULTS_DIR    where text8.md goes (default results/)
#   DEVICE         cpu | cuda (default: cuda when torch sees a GPU, else --cpu)
#   VENV           the environment made by recipes/setup.sh (default .venv)
# Options: --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
NAME=text8.sh
source "$ROOT/recipes/_common.sh"
parse_options "" "$@"

SCHEMES=${SCHEMES:-none blank unigram kn}
GAMMAS=${GAMMAS:-0.1 0.2 0.3}
HIDDEN=${HIDDEN:-512}
DROPOUT=${DROPOUT:-0}
WORDS_PER_LINE=${WORDS_PER_LINE:-1000}
TRAIN_CHARS=${TRAIN_CHARS:-90000000}
VALID_CHARS=${VALID_CHARS:-5000000}
TEST_CHARS=${TEST_CHARS:-5000000}
MIN_COUNT=${MIN_COUNT:-10}
MAX_EPOCH=${MAX_EPOCH:-200}
HALVINGS=${HALVINGS:-8}
SEED=${SEED:-1}
EXTRA_ARGS=${EXTRA_ARGS:-}
WORK=$(realpath -m "${WORK:-runs/text8}")
RESULTS_DIR=${RESULTS_DIR:-$ROOT/results}
TEXT8_URL=http://mattmahoney.net/dc/text8.zip

check_env
detect_device

# 1. data: download (or take TEXT8), split, <unk>, lines
if [ -n "${TEXT8:-}" ]; then
  [ -f "$TEXT8" ] || die "TEXT8=$TEXT8 does not exist"
  TEXT8=$(realpath "$TEXT8")
else
  TEXT8="$WORK/text8.zip"
  fetch "$TEXT8_URL" "$TEXT8" "Download text8.zip yourself and set TEXT8 to its path (the zip or the unzipped text8)."
fi
TEXT="$WORK/text"
fresh_step "$TEXT" "$PY" "$ROOT/recipes/prepare_text8.py" --input "$TEXT8" --outdir "$TEXT" \
  --train-chars "$TRAIN_CHARS" --valid-chars "$VALID_CHARS" --test-chars "$TEST_CHARS" \
  --min-count "$MIN_COUNT" --words-per-line "$WORDS_PER_LINE"

MODEL_ARGS=(--arch noising_lstm_lm_medium --hidden-size "$HIDDEN" --dropout "$DROPOUT")
TEXT_TRAIN="$TEXT/train.txt"; TEXT_VALID="$TEXT/valid.txt"; TEXT_TEST="$TEXT/test.txt"
RUN_DIR="$WORK/h$HIDDEN"
OUT="$RESULTS_DIR/text8.md"
TITLE="Text8, $HIDDEN-unit model without dropout (paper Table 3)"
NOTES="Data: $TEXT8 split at characters $TRAIN_CHARS / +$VALID_CHARS / +$TEST_CHARS, words seen <= $MIN_COUNT times in train -> <unk>, $WORDS_PER_LINE words per line (each line ends with </s>).
The paper reports 15.3M / 848K / 855K tokens and a 42K vocabulary; ours: $( [ -f "$TEXT/stats.json" ] && cat "$TEXT/stats.json" | tr -d '\n ' || true).
The paper does not list its gamma_0 values."
declare -A PAPER_VALID=([none]=94.3 [blank]=85.0 [unigram]=85.2 [kn]=84.5)
declare -A PAPER_TEST=([none]=123.6 [blank]=110.7 [unigram]=111.3 [kn]=110.6)

source "$ROOT/recipes/_lm.sh"
