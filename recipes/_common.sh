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

choose_device()  { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" device "$@"; }    # auto|cpu|cuda
fetch()          { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" fetch "$@"; }     # URL DEST HINT
prepare()        { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" prepare "$@"; }   # DIR CMD...
train()          { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" train "$@"; }     # SAVE_DIR CMD...
evaluate()       { "$PY" recipes/steps.py --prog "$NAME" "${DRY[@]}" evaluate "$@"; }  # OUT CMD... (CMD > OUT)
check_settings() { "$PY" recipes/report.py check --prog "$NAME" "$@"; }                # NAME=VALUE...
best_run()       { "$PY" recipes/report.py best --prog "$NAME" "${DRY[@]}" "$@"; }     # RUN...
write_results()  { "$PY" recipes/report.py write --prog "$NAME" "${DRY[@]}" "$@"; }    # TABLE --out PAGE ...
