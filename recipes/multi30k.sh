#!/usr/bin/env bash
# Multi30k En-De (WMT16 multimodal task 1: 29,000 / 1,014 / 1,000 pairs): the IWSLT'15 translation
# pipeline of iwslt15_en_de.sh on a corpus small enough for a CPU. Tokenize (sacremoses, or a simple
# fallback), word vocabularies (or --spm: sentencepiece), one LSTM encoder-decoder with dot attention
# per noising row and gamma_0 (SGD lr 1.0, clip 5, paper_halving with the 1% rule), validation
# perplexity picks gamma_0, fairseq-generate on test2016, BLEU with sacrebleu. Writes
# $RESULTS_DIR/multi30k.md (multi30k-spm.md with --spm, multi30k-ARCH-adam.md for an ARCH other
# than noising_lstm_* and OPTIMIZER=adam; the paper has no Multi30k table: Table 4's IWSLT figures are shown for
# orientation only). Each Multi30k file ends with one extra empty line, which is dropped.
#
#   bash recipes/setup.sh && HIDDEN=128 ROWS="none kn" GAMMAS=0.2 bash recipes/multi30k.sh
#
# Environment:
#   MULTI30K_DIR  folder with train.{en,de} val.{en,de} test.{en,de}; default ../shared/data/multi30k
#                 beside the repository when it exists, else downloaded from MULTI30K_URL
#                 (default https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw,
#                 files train / val / test_2016_flickr .en/.de gz) into $WORK/multi30k
#   ROWS          rows of the table: schemes, or scheme:source / scheme:target to noise one side
#                 (default "none blank unigram kn kn:source kn:target")
#   GAMMAS        gamma_0 values tried for every noised row (default "0.1 0.2 0.3"); one run each
#   GAMMAS_<scheme>  the grid of one scheme's rows instead of GAMMAS, e.g. GAMMAS_kn="0.2 0.4"
#   ARCH          default noising_lstm_iwslt_en_de (2 x 512, dropout 0.2, reversed source);
#                 noising_lstm_seq2seq_tiny for tests; any fairseq translation architecture, e.g.
#                 transformer_iwslt_de_en (with OPTIMIZER=adam)
#   HIDDEN DROPOUT LAYERS   override the architecture's values (HIDDEN and LAYERS: noising_lstm_*
#                 architectures only; give other architectures' sizes in EXTRA_ARGS)
#   OPTIMIZER     sgd (default: the paper's SGD 1.0, clip 5, 1% halving rule, HALVINGS halvings) or
#                 adam (label smoothing LABEL_SMOOTHING (0.1), Adam with WARMUP (4000) warm-up
#                 updates and inverse-sqrt decay, stop after PATIENCE (10) epochs without a better
#                 validation); LR the learning rate (default 1.0 for sgd, 0.0005 for adam)
#   BATCH_SIZE    default 128; MAX_EPOCH default 50; HALVINGS default 8; BEAM default 5; SEED 1
#   NWORDS        vocabulary per language (default 50000; fairseq keeps all words if fewer)
#   TOKENIZER     auto | moses | simple (default auto: moses when sacremoses is installed)
#   SPM_VOCAB SPM_JOINT   with --spm: pieces per model (default 16000), 1 for one joint model
#   EXTRA_ARGS    more fairseq-train flags (e.g. "--max-update 20")
#   GEN_ARGS      more fairseq-generate flags (e.g. "--max-len-b 10")
#   WORK          working folder (default runs/multi30k); finished steps are skipped on a rerun,
#                 unfinished training resumes from checkpoint_last.pt
#   RESULTS_DIR   where multi30k.md goes (default results/)
#   DEVICE        cpu | cuda (default: cuda when torch sees a GPU, else --cpu)
#   VENV          the environment made by recipes/setup.sh (default .venv)
#   JOBS THREADS TIME_BUDGET EVAL_RESERVE MPS STATUS_EVERY   how the runs share the machine (below)
# Options: --spm sentencepiece instead of word vocabularies (output detokenized by sentencepiece);
# --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."
source recipes/_common.sh
SPM=${SPM:-0}
parse_options --spm "$@"

MULTI30K_URL=${MULTI30K_URL:-https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw}
ROWS=${ROWS:-none blank unigram kn kn:source kn:target}
GAMMAS=${GAMMAS:-0.1 0.2 0.3}
ARCH=${ARCH:-noising_lstm_iwslt_en_de}
BATCH_SIZE=${BATCH_SIZE:-128}
MAX_EPOCH=${MAX_EPOCH:-50}
HALVINGS=${HALVINGS:-8}
OPTIMIZER=${OPTIMIZER:-sgd}
WARMUP=${WARMUP:-4000}
LABEL_SMOOTHING=${LABEL_SMOOTHING:-0.1}
PATIENCE=${PATIENCE:-10}
BEAM=${BEAM:-5}
NWORDS=${NWORDS:-50000}
TOKENIZER=${TOKENIZER:-auto}
SPM_VOCAB=${SPM_VOCAB:-16000}
SPM_JOINT=${SPM_JOINT:-0}
SEED=${SEED:-1}
EXTRA_ARGS=${EXTRA_ARGS:-}
GEN_ARGS=${GEN_ARGS:-}
WORK=$(realpath -m "${WORK:-runs/multi30k}")
RESULTS_DIR=${RESULTS_DIR:-results}
SETTINGS=(ROWS="$ROWS" GAMMAS="$GAMMAS" ARCH="$ARCH" HIDDEN="${HIDDEN:-}" DROPOUT="${DROPOUT:-}"
          LAYERS="${LAYERS:-}" BATCH_SIZE="$BATCH_SIZE" MAX_EPOCH="$MAX_EPOCH" HALVINGS="$HALVINGS"
          OPTIMIZER="$OPTIMIZER" LR="${LR:-}" WARMUP="$WARMUP" LABEL_SMOOTHING="$LABEL_SMOOTHING" PATIENCE="$PATIENCE"
          BEAM="$BEAM" NWORDS="$NWORDS" TOKENIZER="$TOKENIZER" SPM="$SPM" SPM_VOCAB="$SPM_VOCAB"
          SPM_JOINT="$SPM_JOINT" SEED="$SEED" EXTRA_ARGS="$EXTRA_ARGS" GEN_ARGS="$GEN_ARGS"
          "${ROWS_SETTINGS[@]}")
require_venv
check_settings "${SETTINGS[@]}"
DEVICE=$(choose_device "${DEVICE:-auto}")
DEVICE_ARGS=()
if [ "$DEVICE" = cpu ]; then DEVICE_ARGS=(--cpu); fi
translation_names  # MODEL (in run folder names) and PAGE_SUFFIX

# 1. data: MULTI30K_DIR (or the shared copy beside the repository, or a download), then the raw
#    pairs without the files' extra empty last line
if [ -z "${MULTI30K_DIR:-}" ] && [ -f ../shared/data/multi30k/train.en ]; then
  MULTI30K_DIR=../shared/data/multi30k
fi
if [ -n "${MULTI30K_DIR:-}" ]; then
  for f in train.en train.de val.en val.de test.en test.de; do
    [ -f "$MULTI30K_DIR/$f" ] || die "MULTI30K_DIR=$MULTI30K_DIR lacks $f"
  done
else
  MULTI30K_DIR=$WORK/multi30k
  for l in en de; do
    for split in train:train val:val test:test_2016_flickr; do
      fetch "$MULTI30K_URL/${split#*:}.$l.gz" "$MULTI30K_DIR/${split%%:*}.$l.gz" \
        "Download Multi30k task 1 (train, val, test2016 .en/.de) yourself and set MULTI30K_DIR."
    done
  done
fi
MULTI30K_DIR=$(realpath -m "$MULTI30K_DIR")
RAW=$WORK/raw
prepare "$RAW" "$PY" recipes/prepare_translation.py plain --indir "$MULTI30K_DIR" --outdir "$RAW" \
  --src en --tgt de --split train=train --split valid=val --split test=test

# 2.-4. segment and binarize, train, validate and decode test: the same steps for both translation
#    recipes, in recipes/_translation_steps.sh (PAGE_TABLE and PAGE_DATA: the results page)
PAGE_TABLE=multi30k PAGE_DATA=$MULTI30K_DIR
source recipes/_translation_steps.sh

# 5. the results page (our table beside Table 4's IWSLT figures, every command), the training logs
#    and the chosen runs' test translations
write_results "${PAGE[@]}" --runs "${RUNS[@]}"
