# Shared by the recipes (sourced from the repository root): the environment, the command line, and
# one shell function per kind of step. The steps are recipes/steps.py: each prints its command
# ("+ CMD", or "= done already: CMD" when it finished before), then runs it unless --dry-run.
# gamma_0 selection and the results pages are recipes/report.py.

NAME=$(basename "$0")   # the recipe, in messages
VENV=${VENV:-.venv}     # made by recipes/setup.sh
BIN=$VENV/bin
PY=$BIN/python
DRY_RUN=0
DRY=()

die() { echo "$NAME: $*" >&2; exit 1; }

# parse_options EXTRA ARGS...: --help prints the recipe's header comment, --dry-run prints the
# commands and runs none, --spm (accepted when EXTRA is --spm) sets SPM=1; anything else exits 2
parse_options() {
  local extra=$1 arg; shift
  for arg in "$@"; do
    case "$arg" in
      --help|-h) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "recipes/$NAME"; exit 0 ;;
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

choose_device()  { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" device "$@"; }    # auto|cpu|cuda
fetch()          { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" fetch "$@"; }     # URL DEST HINT
prepare()        { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" prepare "$@"; }   # DIR CMD...
train()          { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" train "$@"; }     # SAVE_DIR CMD...
evaluate()       { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" evaluate "$@"; }  # OUT CMD... (CMD > OUT)
check_settings() { "$PY" recipes/report.py check --prog "$NAME" "$@"; }                # NAME=VALUE...
best_run()       { "$PY" recipes/report.py best --prog "$NAME" "${DRY[@]}" "$@"; }     # RUN...
write_results()  { "$PY" recipes/report.py write --prog "$NAME" "${DRY[@]}" "$@"; }    # TABLE --out PAGE ...
