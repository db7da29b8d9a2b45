#!/usr/bin/env bash
# Driver of a lent-GPU session, run on the device machine from the repository root, one phase per
# device call (each call at most 10 minutes; start the next call within 30 s of the last, or the
# machine and its runs are gone). PLAN picks the work, one or several of (default ptb-medium):
#   quickstart   issue 10: recipes/quickstart.sh on cuda (the medium none/kn pair, whole protocol)
#   ptb-medium   Table 2, medium: one recipes/ptb.sh job per scheme and gamma_0 (GAMMAS_*)
#   ptb-large    Table 2, large (issue 13): none and kn first (SCHEMES to add blank unigram)
#   multi30k     issue 12: the six LSTM rows (2 x 512, SGD) and a Transformer none/kn pair (Adam)
# Phases:
#   bash tools/gpu_session.sh plan             print every job's command (also on a CPU: a check)
#   bash tools/gpu_session.sh start SECONDS    install, launch the jobs (setsid), watch until SECONDS
#   bash tools/gpu_session.sh wait SECONDS     watch until SECONDS (into this call) or all jobs done
#   bash tools/gpu_session.sh finish SECONDS   watch; then write the results pages (all done), or
#                                              stop the jobs, the logs telling where they were
# Each job is one recipe run for one row, with its own RESULTS_DIR under runs/partial/; once all are
# done, the final command reruns the recipe over all rows, finds every step done and writes the
# page into results/. Every phase but plan ends by archiving logs and pages (no checkpoints) into
# $OUT/gpu.tgz. Prepared on the development machine (.gpu/ is in .git/info/exclude; carry it):
#   .gpu/w/    wheels of ve-fairseq, hydra-core, omegaconf, antlr4-python3-runtime, bitarray and
#              sacremoses for CPython 3.12 (bash recipes/setup.sh --build-wheelhouse .gpu/w
#              --python-version 3.12, then only those; the image has torch and the rest); the
#              plugin itself is installed from the working tree
#   .gpu/ptb/ .gpu/multi30k/   copies of ../shared/data/ptb and multi30k (../shared does not travel)
# First use and its measurements: results/gpu-h100-2026-11-23/README.md.
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
PLAN=${PLAN:-ptb-medium}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export VENV=${VENV:-/tmp/venv}  # made by "start": the image's python3 (its CUDA torch) + our wheels
export PATH=$VENV/bin:$PATH
PTB=${GPU_PTB:-.gpu/ptb} M30K=${GPU_MULTI30K:-.gpu/multi30k}  # the data copies (tests: elsewhere)
R=${GPU_RUNS:-runs}  # the recipes' working folders and the partial pages
LOGS=$R/logs
export GAMMAS=${GAMMAS:-0.1 0.2} GAMMAS_kn=${GAMMAS_kn:-0.2 0.4}  # the gamma_0 grids

JOBS=()    # "name|VAR=value ... bash recipes/X.sh"
FIRST=()   # the index in JOBS of each plan's first job, which prepares the plan's data
READY=()   # the markers those jobs write once the data are prepared
FINAL=()   # the commands that write the pages once every job is done
for plan in $PLAN; do
FIRST+=("${#JOBS[@]}")
case "$plan" in
quickstart)
  JOBS+=("quickstart|DEVICE=cuda THREADS=1 PTB_DIR=$PTB WORK=$R/quickstart bash recipes/quickstart.sh")
  ;;
ptb-medium | ptb-large)
  SIZE=${plan#ptb-}
  SCHEMES=${SCHEMES:-$([ "$SIZE" = medium ] && echo "none blank unigram kn" || echo "none kn")}
  COMMON="SIZE=$SIZE PTB_DIR=$PTB WORK=$R/ptb DEVICE=cuda"
  for s in $SCHEMES; do
    grid=GAMMAS_$s
    for g in $([ "$s" = none ] && echo 0 || echo "${!grid:-$GAMMAS}"); do
      JOBS+=("ptb-$SIZE-$s-$g|$COMMON SCHEMES=$s GAMMAS=$g GAMMAS_$s=$g ANALYZE=0 RESULTS_DIR=$R/partial/ptb-$SIZE-$s-$g bash recipes/ptb.sh")
    done
  done
  FINAL+=("$COMMON SCHEMES='$SCHEMES' bash recipes/ptb.sh")
  READY+=("$R/ptb/data-bin/.done")
  ;;
multi30k)
  ROWS=${ROWS:-none blank unigram kn kn:source kn:target}
  COMMON="MULTI30K_DIR=$M30K WORK=$R/multi30k DEVICE=cuda"
  TRANSFORMER="ARCH=transformer_iwslt_de_en OPTIMIZER=adam DROPOUT=0.3 WARMUP=${WARMUP:-1000} MAX_EPOCH=${TRANSFORMER_EPOCHS:-40}"
  for row in $ROWS; do
    grid=GAMMAS_${row%%:*}
    for g in $([ "$row" = none ] && echo 0 || echo "${!grid:-$GAMMAS}"); do
      JOBS+=("m30k-${row/:/-}-$g|$COMMON ROWS=$row GAMMAS=$g GAMMAS_${row%%:*}=$g RESULTS_DIR=$R/partial/m30k-${row/:/-}-$g bash recipes/multi30k.sh")
    done
  done
  for row in none kn; do
    g=$([ "$row" = none ] && echo 0 || echo 0.2)
    JOBS+=("m30k-transformer-$row-$g|$COMMON $TRANSFORMER ROWS=$row GAMMAS=$g GAMMAS_kn=$g RESULTS_DIR=$R/partial/m30k-transformer-$row-$g bash recipes/multi30k.sh")
  done
  FINAL+=("$COMMON ROWS='$ROWS' bash recipes/multi30k.sh" "$COMMON $TRANSFORMER ROWS='none kn' GAMMAS=0.2 GAMMAS_kn=0.2 bash recipes/multi30k.sh")
  READY+=("$R/multi30k/data-bin-w50000/.done")
  ;;
*) echo "gpu_session.sh: PLAN must name quickstart, ptb-medium, ptb-large or multi30k, got '$plan'" >&2; exit 2 ;;
esac
done

elapsed() { echo $(( $(date +%s) - T0 )); }
name_of() { echo "${1%%|*}"; }
command_of() { echo "${1#*|}"; }

status() {
  echo "== $(date -u +%H:%M:%S) ($(elapsed) s into this call)"
  for job in "${JOBS[@]}"; do
    local name; name=$(name_of "$job")
    [ -f "$LOGS/$name.log" ] || continue
    printf "%-34s %s | %s\n" "$name" "$(cat "$LOGS/$name.exit" 2>/dev/null || echo running)" \
      "$(grep -E "valid on 'valid'|train_inner" "$LOGS/$name.log" | tail -1 | sed 's/.*| epoch/epoch/' | cut -c1-110)"
  done
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
}

all_done() {
  for job in "${JOBS[@]}"; do [ "$(cat "$LOGS/$(name_of "$job").exit" 2>/dev/null)" = 0 ] || return 1; done
}

watch_until() {  # seconds
  while [ "$(elapsed)" -lt "$1" ]; do
    local running=0
    for job in "${JOBS[@]}"; do [ -f "$LOGS/$(name_of "$job").exit" ] || running=1; done
    if [ "$running" = 0 ]; then
      if all_done; then echo "all jobs done"; return 0; fi
      echo "a job failed: see $LOGS/*.exit"; return 1
    fi
    sleep 45
    status
  done
  return 1
}

launch() {  # job
  local name; name=$(name_of "$1")
  setsid bash -c "env $(command_of "$1") > $LOGS/$name.log 2>&1 < /dev/null; echo \$? > $LOGS/$name.exit" &
}

archive() {
  tar czf "$OUT/gpu.tgz" --exclude='*.pt' --exclude='data-bin*' --exclude='*.bin' --exclude='*.idx' \
    "$LOGS" "$R/partial" results "$R"/ptb/*/ "$R"/multi30k/runs-*/ "$R"/quickstart/*/ 2>/dev/null
  ls -la "$OUT"
}

case "${1:-}" in
plan)
  for job in "${JOBS[@]}"; do echo "job $(name_of "$job"): $(command_of "$job")"; done
  for cmd in "${FINAL[@]}"; do echo "final: $cmd"; done
  exit 0
  ;;
start)
  mkdir -p "$LOGS"
  SYSPY=$(command -v python3)
  "$SYSPY" -m venv --system-site-packages --without-pip "$VENV"
  # the image's python3 is itself a venv: let ours see its site-packages (torch, pip, setuptools)
  "$SYSPY" -c 'import site; print(site.getsitepackages()[0])' \
    > "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/image-site.pth"
  # the carried wheels, and this plugin built from the travelling tree (not a stale wheel)
  "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
    $(ls .gpu/w/*.whl | grep -v fairseq_noising) . 2>&1 | tail -3
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, fairseq, fairseq_noising; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'fairseq', fairseq.__version__)"
  for i in "${FIRST[@]}"; do launch "${JOBS[$i]}"; done
  for marker in "${READY[@]}"; do for _ in $(seq 120); do [ -f "$marker" ] && break; sleep 2; done; done
  for i in "${!JOBS[@]}"; do [[ " ${FIRST[*]} " == *" $i "* ]] || launch "${JOBS[$i]}"; done
  sleep 30; for f in "$LOGS"/*.log; do echo "-- $f"; tail -n 3 "$f"; done
  watch_until "$2"
  ;;
wait)
  watch_until "$2"
  ;;
finish)
  if watch_until "$2"; then
    for cmd in "${FINAL[@]}"; do bash -c "env $cmd" >> "$LOGS/final.log" 2>&1; tail -30 "$LOGS/final.log"; done
  else
    echo "not finished: stopping the jobs; their logs say the epoch and learning rate each reached"
    pkill -f "recipes/(ptb|multi30k|quickstart).sh|quickstart.py"; pkill -INT -f fairseq-train; sleep 10; pkill -9 -f fairseq-train
  fi
  ;;
*) echo "usage: PLAN=... bash tools/gpu_session.sh plan | start S | wait S | finish S" >&2; exit 2 ;;
esac
status
archive
