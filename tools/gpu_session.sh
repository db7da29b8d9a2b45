#!/usr/bin/env bash
# Driver of a lent-GPU session for PTB medium (Table 2), run on the device machine from the
# repository root, one phase per device call (each call at most 10 minutes; start the next call
# within 30 s of the last, or the machine and its runs are gone):
#   bash tools/gpu_session.sh start SECONDS    install, benchmarks, launch the runs (setsid), watch
#   bash tools/gpu_session.sh wait SECONDS     watch until SECONDS (into this call) or all runs done
#   bash tools/gpu_session.sh finish SECONDS   watch; then write results/ptb-medium.md (all done)
#                                              or stop the runs and evaluate checkpoint_best.pt
# Every phase ends by archiving the logs (no checkpoints) into $OUT/gpu.tgz.
# Prepared on the development machine (the folder .gpu/ is in .git/info/exclude and is carried):
#   .gpu/w/    wheels of ve-fairseq, hydra-core, omegaconf, antlr4-python3-runtime, bitarray,
#              sacremoses and this plugin for CPython 3.12 (from bash recipes/setup.sh
#              --build-wheelhouse DIR --python-version 3.12; the image has torch and the rest)
#   .gpu/ptb/  a copy of ../shared/data/ptb (../shared does not travel)
# QUICKSTART=1 also runs the quick start's GPU pair. Results of its first use:
# results/gpu-h100-2026-11-23/README.md.
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/logs
VENV=/tmp/venv  # the image's python3 (with its CUDA torch) plus our wheels
export VENV PATH=/tmp/venv/bin:$PATH
PTB=$PWD/.gpu/ptb
SCHEMES="none blank unigram kn"
export GAMMAS="0.1 0.2" GAMMAS_kn="0.2 0.4"  # the gamma_0 grids, read by recipes/ptb.sh
RUNS="none-0"
for s in blank unigram kn; do v=GAMMAS_$s; for g in ${!v:-$GAMMAS}; do RUNS+=" $s-$g"; done; done
MED=runs/ptb/medium

elapsed() { echo $(( $(date +%s) - T0 )); }

status() {
  echo "== $(date -u +%H:%M:%S) ($(elapsed) s into this call)"
  for d in $MED/*/ runs/quickstart/none/ runs/quickstart/kn/; do
    [ -f "$d/train.log" ] || continue
    awk -v name="$d" '
      /valid on .valid. subset/ { n++; match($0, /epoch [0-9]+/); ep=substr($0, RSTART+6, RLENGTH-6);
                                  match($0, /\| ppl [0-9.]+/); vp=substr($0, RSTART+6, RLENGTH-6) }
      /train_inner|epoch [0-9]+: +[0-9]+ \// { inner=$0 }
      /lr [0-9.e-]+ \|/ { }
      END { sub(/.*epoch /, "epoch ", inner); printf "%-32s valid epochs %3d last valid ppl %-8s | %s\n", name, n, vp, substr(inner, 1, 90) }
    ' "$d/train.log"
    [ -f "$d/.done" ] && echo "      done"
  done
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
}

all_done() {
  for r in $RUNS; do [ -f "$MED/${r%-*}-g${r#*-}/.done" ] || return 1; done
  [ "${QUICKSTART:-0}" = 0 ] || [ -f runs/quickstart/results.md ] || return 1
  return 0
}

watch_until() {  # seconds
  while [ "$(elapsed)" -lt "$1" ]; do
    if ! pgrep -f "recipes/ptb.sh|recipes/quickstart.sh" >/dev/null; then
      if all_done; then echo "all runs done"; return 0; fi
      echo "no run is running and not all are done: see runs/logs/"; return 1
    fi
    sleep 45
    status
  done
  return 1
}

launch() {  # name VAR=value...
  local name=$1; shift
  setsid env SIZE=medium PTB_DIR="$PTB" WORK=runs/ptb DEVICE=cuda RESULTS_DIR="runs/partial/$name" "$@" \
    bash recipes/ptb.sh > "runs/logs/ptb-$name.log" 2>&1 < /dev/null &
}

case "$1" in
start)
  SYSPY=$(command -v python3)
  "$SYSPY" -m venv --system-site-packages --without-pip /tmp/venv
  "$SYSPY" -m pip --python /tmp/venv/bin/python install -q --no-index --no-deps --no-compile --no-cache-dir .gpu/w/*.whl 2>&1 | tail -3
  # the image's python3 is itself a venv: let ours see its site-packages (torch)
  "$SYSPY" -c 'import site; print(site.getsitepackages()[0])' > /tmp/venv/lib/python3.12/site-packages/image-site.pth
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, fairseq, fairseq_noising; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'fairseq', fairseq.__version__)"
  nproc
  # benchmarks on the quiet GPU first
  timeout 120 python3 bench/bench_lm_speed.py --data "$PTB/ptb.train.txt" --clip-norm 5 --steps 50 --rounds 3 \
    --memory-models noising,stock,plain 2>&1 | tee runs/logs/bench_lm_speed_medium.log
  timeout 100 python3 bench/bench_lm_speed.py --data "$PTB/ptb.train.txt" --clip-norm 5 --steps 20 --rounds 2 \
    --hidden-size 1500 --dropout 0.65 --memory-sizes "" 2>&1 | tee runs/logs/bench_lm_speed_large.log
  timeout 100 python3 bench/bench_training_speed.py --ptb-dir "$PTB" --mode inprocess --arch noising_lstm_lm_medium \
    --device cuda --blocks 200 2>&1 | grep -v "^20..-" | tee runs/logs/bench_training_speed_medium.log
  echo "benchmarks done at $(elapsed) s"
  # none first: it binarizes; the others start once the binarization is done
  launch none-0 SCHEMES=none
  for i in $(seq 60); do [ -f runs/ptb/data-bin/.done ] && break; sleep 2; done
  for r in ${RUNS#none-0 }; do launch "$r" SCHEMES="${r%-*}" GAMMAS="${r#*-}" GAMMAS_${r%-*}="${r#*-}"; done
  [ "${QUICKSTART:-0}" = 0 ] || setsid env DEVICE=cuda THREADS=1 PTB_DIR="$PTB" bash recipes/quickstart.sh > runs/logs/quickstart.log 2>&1 < /dev/null &
  sleep 30; for f in runs/logs/*.log; do echo "-- $f"; tail -n 3 "$f"; done
  watch_until "$2"
  ;;
wait)
  watch_until "$2"
  ;;
finish)
  if watch_until "$2"; then
    env SIZE=medium PTB_DIR="$PTB" WORK=runs/ptb DEVICE=cuda SCHEMES="$SCHEMES" \
      bash recipes/ptb.sh > runs/logs/ptb-final.log 2>&1
    tail -40 runs/logs/ptb-final.log
  else
    echo "not finished: stopping the runs, evaluating checkpoint_best.pt"
    pkill -f "recipes/ptb.sh|recipes/quickstart.sh|quickstart.py"; pkill -INT -f fairseq-train; sleep 10; pkill -9 -f fairseq-train
    for d in $MED/*/ runs/quickstart/none/ runs/quickstart/kn/; do
      [ -f "$d/checkpoint_best.pt" ] || continue
      data=runs/ptb/data-bin; [[ "$d" == runs/quickstart/* ]] && data=runs/quickstart/data-bin
      for split in valid test; do
        [ -s "$d/$split.partial.eval.log" ] && continue
        fairseq-eval-lm "$data" --user-dir fairseq_noising --task noised_language_modeling --path "$d/checkpoint_best.pt" \
          --gen-subset $split --stateful-bptt --batch-size 1 --tokens-per-sample 35 > "$d/$split.partial.eval.log" 2>&1 &
      done
    done
    wait
    grep -H Perplexity $MED/*/*.eval.log runs/quickstart/*/*.eval.log
  fi
  ;;
esac
status
tar czf "$OUT/gpu.tgz" --exclude='*.pt' --exclude=runs/quickstart/data-bin \
  runs/logs runs/partial runs/ptb/medium runs/quickstart results/ptb-medium* 2>/dev/null
ls -la "$OUT"
