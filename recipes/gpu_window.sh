#!/usr/bin/env bash
# One call of a GPU window on an offline GPU node: install the plugin from GPU_DIR/wheelhouse
# (once), train Table 2's medium rows (ptb.sh) and then, with MIN_NEXT minutes left, Table 4's
# rows at the paper's size (multi30k.sh) under a CUDA MPS daemon, all within TIME_BUDGET hours;
# every minute and at the end, the rows (no checkpoints), pages and log are copied into OUT.
# Run again with the same GPU_DIR, it resumes: ended rows are skipped, the others train on.
#
#   OUT=out TIME_BUDGET=0.25 bash recipes/gpu_window.sh [OVERRIDE...]
#
# GPU_DIR (default .gpu) holds wheelhouse/, ptb/data-bin and multi30k/{raw,tok,data-bin}, built
# online beforehand (docs/sweeps.md, One call of a GPU window). OUT gets window.tar.gz (GPU_DIR's rows and
# pages without *.pt), the pages' .md files and window.log. OVERRIDEs go to both tables.
# Environment: OUT, TIME_BUDGET (hours of this call), GPU_DIR, MPS (default 1), PYTHON (the
# node's python3 with its CUDA torch), VENV (default .venv), PTB_ROWS (default none and kn at 0.2),
# MT_ROWS (default none and unigram at 0.2, both sides), MT_SEEDS (default 2,3), SEED (PTB's, 1),
# MIN_NEXT (minutes, default 3), EVAL_RESERVE (as in ptb.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=gpu_window.sh T0=$(date +%s) GPU_DIR=${GPU_DIR:-.gpu} VENV=${VENV:-.venv} PYTHON=${PYTHON:-python3}
PTB_ROWS=${PTB_ROWS:-"{noise_scheme:none,noise_gamma:0},{noise_scheme:kn,noise_gamma:0.2}"}
MT_ROWS=${MT_ROWS:-"{noise_scheme:none,noise_side:both,noise_gamma:0},{noise_scheme:unigram,noise_side:both,noise_gamma:0.2}"}
MT_SEEDS=${MT_SEEDS:-2,3}
export MPS=${MPS:-1} VENV
die() { echo "$NAME: $*" >&2; exit 1; }
case "${1:-}" in --help|-h) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
[ -n "${OUT:-}" ] || die "OUT must name the folder the results are copied into"
[[ "${TIME_BUDGET:-}" =~ ^[0-9]*[.]?[0-9]+$ ]] || die "TIME_BUDGET must be the hours of this call (e.g. 0.25), got '${TIME_BUDGET:-}'"
[ -x "$VENV/bin/fairseq-hydra-train" ] || [ -f "$GPU_DIR/wheelhouse/wheelhouse.json" ] ||
  die "$VENV/bin/fairseq-hydra-train not found and no wheelhouse in $GPU_DIR/wheelhouse to install it from"
for f in ptb/data-bin/dict.txt multi30k/raw/test.de multi30k/tok/test.de multi30k/data-bin/dict.de.txt; do
  [ -f "$GPU_DIR/$f" ] || die "$GPU_DIR/$f not found: build GPU_DIR's data first (DATA_ONLY=1 bash recipes/ptb.sh, multi30k.sh)"
done
mkdir -p "$OUT" "$GPU_DIR/pages"
exec > >(tee -a "$GPU_DIR/window.log") 2>&1
echo "== $NAME $(date -u +%FT%TZ): TIME_BUDGET=$TIME_BUDGET MPS=$MPS GPU_DIR=$GPU_DIR OUT=$OUT $*"

# 1. the copier: every minute and at the end (from the start: a failed install's log comes back too) (an archive through a temporary name, then mv)
copy() {
  tar -czf "$OUT/.window.tar.gz" --exclude='*.pt' -C "$GPU_DIR" --ignore-failed-read ptb/medium multi30k/multi30k pages 2>/dev/null || true
  mv -f "$OUT/.window.tar.gz" "$OUT/window.tar.gz"
  cp -f "$GPU_DIR"/pages/*.md "$GPU_DIR/window.log" "$OUT/" 2>/dev/null || true
}
(while sleep 60 && kill -0 $$; do copy; done) > /dev/null 2>&1 & COPIER=$!  # not holding tee's pipe
trap 'kill $COPIER 2>/dev/null || true; exec > /dev/null 2>&1; sleep 1; copy' EXIT  # tee's last lines too
trap 'exit 143' TERM INT

# 2. the plugin, once: a venv over the node's python (it sees its CUDA torch), the wheels into it
if [ -x "$VENV/bin/fairseq-hydra-train" ]; then echo "$VENV/bin/fairseq-hydra-train found: nothing to install"
else PYTHON="$PYTHON" bash recipes/setup.sh --from-wheelhouse "$GPU_DIR/wheelhouse" --over "$PYTHON"
fi

# hours left of this call; a row's time budget is fairseq's clock, summed over the calls that
# trained it: TIME_BUDGET is what the sweep's rows trained before plus what is left now
left() { awk -v t0="$T0" -v now="$(date +%s)" -v b="$TIME_BUDGET" 'BEGIN { printf "%.4f", b - (now - t0) / 3600 }'; }
trained() {  # SWEEP_DIR: the hours its longest-trained row has trained (its checkpoint_last.pt)
  compgen -G "$1/*/checkpoint_last.pt" > /dev/null || { echo 0; return; }
  "$VENV/bin/python" -c 'import glob, sys; from fairseq_noising.sweep.progress import checkpoint
print(max((checkpoint(d) or {}).get("seconds") or 0 for d in glob.glob(sys.argv[1] + "/*/")) / 3600)' "$1"
}
budget() {  # SWEEP_DIR: TIME_BUDGET and EVAL_RESERVE for its rows, as ptb.sh reads them
  awk -v l="$(left)" -v t="$(trained "$1")" -v r="${EVAL_RESERVE:-}" \
    'BEGIN { if (r == "") r = (l / 5 > 1 / 30) ? l / 5 : 1 / 30; printf "TIME_BUDGET=%.4f EVAL_RESERVE=%.4f", t + l, r }'
}
n() { local s=${1//[^$2]/}; echo ${#s}; }  # how many times the character $2 is in $1

# 3. Table 2, medium; 4. Table 4 at the paper's size, when MIN_NEXT minutes are left
status=0
env $(budget "$GPU_DIR/ptb/medium") SIZE=medium WORK="$GPU_DIR/ptb" RESULTS_DIR="$GPU_DIR/pages" bash recipes/ptb.sh \
  "task=$PTB_ROWS" "common.seed=${SEED:-1}" "hydra.launcher.n_jobs=$(n "$PTB_ROWS" "{")" "$@" || status=$?
if awk -v l="$(left)" -v m="${MIN_NEXT:-3}" 'BEGIN { exit !(l * 60 >= m) }'; then
  env $(budget "$GPU_DIR/multi30k/multi30k") CONFIG=multi30k WORK="$GPU_DIR/multi30k" RESULTS_DIR="$GPU_DIR/pages" bash recipes/multi30k.sh \
    "task=$MT_ROWS" "common.seed=$MT_SEEDS" "hydra.launcher.n_jobs=$(( $(n "$MT_ROWS" "{") * ($(n "$MT_SEEDS" ,) + 1) ))" "$@" || status=$?
else
  echo "$NAME: $(left) h left, under MIN_NEXT=${MIN_NEXT:-3} min: Table 4's rows wait for the next call"
fi
echo "== $NAME $(date -u +%FT%TZ): done (status $status), $(left) h of the call left"
exit $status
