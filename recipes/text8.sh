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
#   JOBS THREADS TIME_BUDGET EVAL_RESERVE MPS STATUS_EVERY   how the runs share the machine (below)
# Options: --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."
source recipes/_common.sh
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
RESULTS_DIR=${RESULTS_DIR:-results}
SETTINGS=(SCHEMES="$SCHEMES" GAMMAS="$GAMMAS" HIDDEN="$HIDDEN" DROPOUT="$DROPOUT"
          WORDS_PER_LINE="$WORDS_PER_LINE" TRAIN_CHARS="$TRAIN_CHARS" VALID_CHARS="$VALID_CHARS"
          TEST_CHARS="$TEST_CHARS" MIN_COUNT="$MIN_COUNT" MAX_EPOCH="$MAX_EPOCH" HALVINGS="$HALVINGS"
          SEED="$SEED" EXTRA_ARGS="$EXTRA_ARGS" "${ROWS_SETTINGS[@]}")
require_venv
check_settings "${SETTINGS[@]}"
DEVICE=$(choose_device "${DEVICE:-auto}")
DEVICE_ARGS=()
if [ "$DEVICE" = cpu ]; then DEVICE_ARGS=(--cpu); fi

# 1. data: download (or take TEXT8), split, <unk>, lines
if [ -n "${TEXT8:-}" ]; then
  [ -f "$TEXT8" ] || die "TEXT8=$TEXT8 does not exist"
else
  TEXT8=$WORK/text8.zip
  fetch http://mattmahoney.net/dc/text8.zip "$TEXT8" \
    "Download text8.zip yourself and set TEXT8 to its path (the zip or the unzipped text8)."
fi
TEXT8=$(realpath -m "$TEXT8")
TEXT=$WORK/text
prepare "$TEXT" "$PY" recipes/prepare_text8.py --input "$TEXT8" --outdir "$TEXT" \
  --train-chars "$TRAIN_CHARS" --valid-chars "$VALID_CHARS" --test-chars "$TEST_CHARS" \
  --min-count "$MIN_COUNT" --words-per-line "$WORDS_PER_LINE"

# 2. binarize
DATA=$WORK/data-bin
prepare "$DATA" "$BIN/fairseq-preprocess" --only-source --trainpref "$TEXT/train.txt" \
  --validpref "$TEXT/valid.txt" --testpref "$TEXT/test.txt" --destdir "$DATA" --workers 2

# 3. train one model per scheme and gamma_0 (none once), JOBS at a time, each evaluated on valid as
#    soon as it ends (stateful evaluation of checkpoint_best.pt, batch 1: every token with its whole
#    left context); a cut-off run resumes from checkpoint_last.pt. The page is rewritten as they go.
read -r -a EXTRA <<< "$EXTRA_ARGS"
EVAL_LM=("$BIN/fairseq-eval-lm" "$DATA" --user-dir fairseq_noising --task noised_language_modeling
         --stateful-bptt --batch-size 1 --tokens-per-sample 35 "${DEVICE_ARGS[@]}")
PAGE=(text8 --out "$RESULTS_DIR/text8.md" --device "$DEVICE" --data "$TEXT8" --settings "${SETTINGS[@]}"
      --prepared "$TEXT" "$DATA")
RUNS=()
for scheme in $SCHEMES; do
  for gamma in $(gammas_of "$scheme"); do
    RUNS+=("$WORK/h$HIDDEN/$scheme-g$gamma")
    train "${RUNS[-1]}" "$BIN/fairseq-train" "$DATA" --user-dir fairseq_noising \
      --task noised_language_modeling --stateful-bptt --noise-scheme "$scheme" --noise-gamma "$gamma" \
      --arch noising_lstm_lm_medium --hidden-size "$HIDDEN" --dropout "$DROPOUT" \
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
for scheme in $SCHEMES; do
  runs=()
  for gamma in $(gammas_of "$scheme"); do runs+=("$WORK/h$HIDDEN/$scheme-g$gamma"); done
  best=$(best_run "${runs[@]}")
  if [ -z "$best" ]; then continue; fi
  evaluate "$best/test.eval.log" "${EVAL_LM[@]}" --path "$best/checkpoint_best.pt" --gen-subset test
done
run_queued "${PAGE[@]}" --runs "${RUNS[@]}"

# 5. the results page (our table beside the paper's Table 3, every command), the training logs and
#    Figure 1 (none against the chosen kn run)
write_results "${PAGE[@]}" --runs "${RUNS[@]}"
