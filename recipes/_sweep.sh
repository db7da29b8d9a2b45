# Sourced by the recipes (from the repository root): --help, the environment made by
# recipes/setup.sh, and `sweep`, the recipes' last step: one table as one Hydra sweep, then its page.
NAME=$(basename "$0")
case "${1:-}" in
  --help|-h) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  -*) echo "$NAME: unknown option $1 (expected --help, or Hydra overrides such as hydra.launcher.n_jobs=2)" >&2; exit 2 ;;
esac
VENV=${VENV:-.venv}
BIN=$VENV/bin
[ -x "$BIN/fairseq-hydra-train" ] || { echo "$NAME: $BIN/fairseq-hydra-train not found: run 'bash recipes/setup.sh' first (or set VENV)" >&2; exit 1; }
die() { echo "$NAME: $*" >&2; exit 1; }
# MPS=1 is refused (no GPU, no MPS control program) before any data is prepared
if [ "${MPS:-0}" = 1 ]; then "$BIN/python" recipes/mps.py --check --prog "$NAME" --flag MPS=1 || exit 1; fi

# sweep CONFIG SWEEP_DIR PAGE [OVERRIDE...]: every row of recipes/config/CONFIG.yaml side by side
# (fairseq-hydra-train -m; each row a folder of SWEEP_DIR, resumed when run again), under a CUDA
# MPS daemon of its own with MPS=1, each row's training stopped within TIME_BUDGET hours less
# EVAL_RESERVE, then the results page copied to PAGE (with its logs and figure). DATA_ONLY=1 stops
# before it: the data is ready, no row runs.
# The page is written even when rows failed; a sweep that started no row (a refused MPS=1, a bad
# override) ends with its own error alone. The status is the sweep's.
sweep() {
  local config=$1 dir=$2 page=$3 status=0
  shift 3
  if [ "${DATA_ONLY:-0}" = 1 ]; then echo "$NAME: data ready in $WORK (DATA_ONLY=1: no sweep)"; return 0; fi
  local cmd=("$BIN/fairseq-hydra-train" -m --config-dir recipes/config --config-name "$config"
             "hydra.sweep.dir=$dir" "$@")
  if [ -n "${TIME_BUDGET:-}" ]; then  # hours per row, EVAL_RESERVE of them (default a fifth,
    # at least 2 minutes) kept for the row's evaluation: fairseq stops training at the rest
    cmd+=("optimization.stop_time_hours=$(awk -v b="$TIME_BUDGET" -v r="${EVAL_RESERVE:-}" \
      'BEGIN { if (b !~ /^[0-9]*[.]?[0-9]+$/) exit 1; if (r == "") r = (b / 5 > 1 / 30) ? b / 5 : 1 / 30
              if (b <= r) exit 1; print b - r }')") ||
      die "TIME_BUDGET must be hours (e.g. 0.5) above EVAL_RESERVE, got '$TIME_BUDGET'"
  fi
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one thread per row: rows share the cores
  if [ "${MPS:-0}" = 1 ]; then cmd=("$BIN/python" recipes/mps.py --folder "$dir/mps" --prog "$NAME" --flag MPS=1 -- "${cmd[@]}"); fi
  echo "+ ${cmd[*]}"
  "${cmd[@]}" || status=$?
  if compgen -G "$dir/*/row.json" > /dev/null; then
    "$BIN/fairseq-noise-page" "$dir" --out "$page" || status=1
  fi
  return $status
}

# ptb_data: PTB's text files (PTB_DIR, else downloaded into WORK/ptb and checked against their
# SHA-256) binarized into WORK/data-bin (skipped when done), by recipes/prepare_ptb.py
# (fairseq_noising.data_prep.ptb, which the benchmarks and the tests use too).
ptb_data() {
  local text=(--download "$WORK/ptb")
  if [ -n "${PTB_DIR:-}" ]; then text=(--ptb-dir "$PTB_DIR"); fi
  "$BIN/python" recipes/prepare_ptb.py --prog "$NAME" "${text[@]}" --destdir "$WORK/data-bin"
}

# translation_data RAW: the translation recipes' segmentation and binarization of RAW/{train,valid,
# test}.{en,de} into WORK/data-bin (skipped when done): Moses words (the NWORDS most frequent per
# language, default 50000), or with SPM=1 sentencepiece pieces (SPM_VOCAB, default 16000; one joint
# model with SPM_JOINT=1; SPM_TYPE=bpe for BPE) with each model's pieces as the dictionary and the
# models beside the data (what --subword-sampling-alpha reads). Sets DATA_OVERRIDES: the data and
# the references BLEU is scored against.
translation_data() {
  local raw=$1 seg=$WORK/tok vocab=(--nwordssrc "${NWORDS:-50000}" --nwordstgt "${NWORDS:-50000}")
  local prepare=(tokenize-dir --tokenizer moses)
  DATA_OVERRIDES=("task.data=$WORK/data-bin" "hydra.callbacks.row.reference=$raw/test.de")
  if [ "${SPM:-0}" = 1 ]; then
    seg=$WORK/spm prepare=(spm-dir --vocab-size "${SPM_VOCAB:-16000}" --model-type "${SPM_TYPE:-unigram}")
    vocab=(--srcdict "$seg/dict.en.txt" --tgtdict "$seg/dict.de.txt")
    if [ "${SPM_JOINT:-0}" = 1 ]; then prepare+=(--joint) vocab=(--joined-dictionary --srcdict "$seg/dict.en.txt"); fi
    DATA_OVERRIDES+=(hydra.callbacks.row.tokenizer=none "hydra.callbacks.row.generate_args=[--post-process,sentencepiece]")
    if [ -f "$WORK/data-bin/dict.de.txt" ] && ! compgen -G "$WORK/data-bin/spm.*.model" > /dev/null; then
      die "$WORK/data-bin holds data binarized without SPM=1's models: set WORK to another folder"
    fi
  else
    DATA_OVERRIDES+=("hydra.callbacks.row.tok_reference=$seg/test.de")
  fi
  [ -f "$seg/test.de" ] || "$BIN/python" recipes/prepare_translation.py "${prepare[@]}" --indir "$raw" --outdir "$seg" --src en --tgt de
  [ -f "$WORK/data-bin/dict.de.txt" ] || "$BIN/fairseq-preprocess" --source-lang en --target-lang de --trainpref "$seg/train" \
    --validpref "$seg/valid" --testpref "$seg/test" "${vocab[@]}" --destdir "$WORK/data-bin" --workers 2
  if [ "${SPM:-0}" = 1 ]; then cp "$seg"/spm.*.model "$WORK/data-bin/"; fi
}
