# Shared by the recipes (sourced from the repository root): the environment, the command line, and
# one shell function per kind of step. The steps are recipes/steps.py: each prints its command
# ("+ CMD", or "= done already: CMD" when it finished before); a preparation runs at once, a
# training or an evaluation is queued, and run_queued (recipes/rows.py) runs the queue, JOBS steps
# side by side, printing a status line per training every STATUS_EVERY seconds. gamma_0 selection,
# the results pages and the status command are recipes/report.py.

# --help of every recipe ends with this block (the lines between the two markers):
# >>> running
# How the runs share the machine (every recipe):
#   JOBS          steps at once, each its own process with its own log (default: every run at once
#                 on cuda, one per core on a CPU); a run that fails does not stop the others
#   THREADS       threads per process (default: the cores shared out between JOBS)
#   STATUS_EVERY  seconds between status lines (default 30): per training its epoch and the share
#                 of it done, lr, halvings, last validation perplexity, updates/s, time left; the
#                 same from another shell: python recipes/report.py status WORK
#   TIME_BUDGET   e.g. 25m or 2h: the recipe ends within it, the page included. Each training
#                 gets fairseq's --stop-time-hours so that EVAL_RESERVE (default a fifth of the
#                 budget, at least 2m) is left for the evaluations and the page; a run so stopped
#                 is evaluated from its checkpoint_best.pt and marked on the page, and resumes when
#                 the recipe runs again. The analyses are left out when the budget is spent.
#   MPS           1: run the steps under a CUDA MPS daemon of the recipe's own (pipe and log folders
#                 in WORK/mps; DEVICE=cuda only), stopped when they end, also on error or Ctrl-C
# The results page is rewritten whenever a run ends or validates an epoch.
# <<< running
NAME=$(basename "$0")   # the recipe, in messages
VENV=${VENV:-.venv}     # made by recipes/setup.sh
BIN=$VENV/bin
PY=$BIN/python
DRY_RUN=0
DRY=()
STARTED=$(date +%s)     # the time budget counts from here
# running the trainings and evaluations (see the recipes' --help): steps at once, threads each,
# TIME_BUDGET for the whole recipe, EVAL_RESERVE of it kept for evaluations and the page, MPS
JOBS=${JOBS:-} THREADS=${THREADS:-} TIME_BUDGET=${TIME_BUDGET:-} EVAL_RESERVE=${EVAL_RESERVE:-}
MPS=${MPS:-0} STATUS_EVERY=${STATUS_EVERY:-30}
ROWS_SETTINGS=(JOBS="$JOBS" THREADS="$THREADS" TIME_BUDGET="$TIME_BUDGET" EVAL_RESERVE="$EVAL_RESERVE"
               MPS="$MPS")

die() { echo "$NAME: $*" >&2; exit 1; }

# parse_options EXTRA ARGS...: --help prints the recipe's header comment, --dry-run prints the
# commands and runs none, --spm (accepted when EXTRA is --spm) sets SPM=1; anything else exits 2
parse_options() {
  local extra=$1 arg; shift
  for arg in "$@"; do
    case "$arg" in
      --help|-h) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "recipes/$NAME"
                 awk '/^# <<< running/ { exit } on { sub(/^# ?/, ""); print } /^# >>> running/ { on = 1 }' \
                   recipes/_common.sh
                 exit 0 ;;
      --dry-run) DRY_RUN=1; DRY=(--dry-run) ;;
      --spm) [ "$extra" = --spm ] || { echo "$NAME: unknown option $arg (expected --dry-run or --help)" >&2; exit 2; }
             SPM=1 ;;
      *) echo "$NAME: unknown option $arg (expected ${extra:+$extra, }--dry-run or --help)" >&2; exit 2 ;;
    esac
  done
}

require_venv() {
  [ -x "$BIN/fairseq-train" ] || die "$BIN/fairseq-train not found: run 'bash recipes/setup.sh' first (or set VENV)"
}

# gammas_of ROW: the gamma_0 grid of a scheme (or scheme:side): 0 for none, else GAMMAS_<scheme>
# when it is set, else GAMMAS
gammas_of() {
  local grid="GAMMAS_${1%%:*}"
  if [ "${1%%:*}" = none ]; then echo 0; else echo "${!grid:-$GAMMAS}"; fi
}

# translation_protocol: sets PROTOCOL_ARGS, the optimisation flags of a translation run, by OPTIMIZER:
#   sgd   the paper's (Luong et al. 2015): cross-entropy summed over the target tokens and averaged
#         over the sentences, SGD at LR (default 1.0), clip 5, the rate halved once an epoch improves
#         validation perplexity by less than 1%, stop at the first non-improvement after HALVINGS
#   adam  a Transformer's (fairseq's IWSLT example): label-smoothed (LABEL_SMOOTHING) cross-entropy
#         per target token, Adam (0.9, 0.98) at LR (default 0.0005) after WARMUP updates of linear
#         warm-up, then inverse-sqrt decay, weight decay 0.0001; stop after PATIENCE validations
#         without improvement
# Both keep the checkpoint of the best validation nll_loss (per target token, no smoothing).
translation_protocol() {
  if [ "$OPTIMIZER" = sgd ]; then
    PROTOCOL_ARGS=(--criterion cross_entropy --sentence-avg --optimizer sgd --lr "${LR:-1.0}" --clip-norm 5.0
                   --lr-scheduler paper_halving --halving-threshold 0.01 --halvings "$HALVINGS" --stop-min-lr 0)
  else
    PROTOCOL_ARGS=(--criterion label_smoothed_cross_entropy --label-smoothing "$LABEL_SMOOTHING"
                   --optimizer adam --adam-betas "(0.9, 0.98)" --lr "${LR:-0.0005}" --weight-decay 0.0001
                   --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-07
                   --patience "$PATIENCE")
  fi
  PROTOCOL_ARGS+=(--best-checkpoint-metric nll_loss)
}

# translation_names: MODEL, the model's part of the run folders' names (another architecture, size
# or optimizer trains in folders of its own), and PAGE_SUFFIX, what the results page's name adds
# (-spm with --spm, -ARCH for an architecture other than the paper's noising_lstm_*, -adam)
translation_names() {
  MODEL=$ARCH${HIDDEN:+-h$HIDDEN}
  PAGE_SUFFIX=""
  if [ "$SPM" = 1 ]; then PAGE_SUFFIX=-spm; fi
  if [[ $ARCH != noising_lstm_* ]]; then PAGE_SUFFIX+=-$ARCH; fi
  if [ "$OPTIMIZER" != sgd ]; then MODEL+=-$OPTIMIZER; PAGE_SUFFIX+=-$OPTIMIZER; fi
}

choose_device()  { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" device "$@" --mps "$MPS"; }  # auto|cpu|cuda
fetch()          { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" fetch "$@"; }     # URL DEST HINT
prepare()        { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" prepare "$@"; }   # DIR CMD...
train()          { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" --queue "$WORK/.queue.$$" train "$@"; }     # SAVE_DIR CMD...
evaluate()       { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" --queue "$WORK/.queue.$$" evaluate "$@"; }  # [--optional] OUT CMD... (CMD > OUT)
# run_queued [PAGE-ARGS...]: the queued steps, JOBS at a time; with the arguments of write_results,
# the page is rewritten as the runs progress
run_queued() {
  local opts=(--device "$DEVICE" --every "$STATUS_EVERY")
  if [ -n "$JOBS" ]; then opts+=(--jobs "$JOBS"); fi
  if [ -n "$THREADS" ]; then opts+=(--threads "$THREADS"); fi
  if [ -n "$TIME_BUDGET" ]; then opts+=(--time-budget "$TIME_BUDGET" --started "$STARTED"); fi
  if [ -n "$EVAL_RESERVE" ]; then opts+=(--reserve "$EVAL_RESERVE"); fi
  if [ "$MPS" = 1 ]; then opts+=(--mps); fi
  if [ $# -gt 0 ]; then opts+=(--page "$@"); fi
  "$PY" recipes/rows.py --prog "$NAME" "${DRY[@]}" --queue "$WORK/.queue.$$" "${opts[@]}"
}
check_settings() { "$PY" recipes/report.py check --prog "$NAME" "$@"; }                # NAME=VALUE...
best_run()       { "$PY" recipes/report.py best --prog "$NAME" "${DRY[@]}" "$@"; }     # RUN...
write_results()  { "$PY" recipes/report.py write --prog "$NAME" "${DRY[@]}" "$@"; }    # TABLE --out PAGE ...
