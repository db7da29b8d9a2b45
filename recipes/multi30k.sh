#!/usr/bin/env bash
# Multi30k En-De (WMT16 multimodal task 1: 29,000 / 1,014 / 1,000 pairs): the IWSLT'15 translation
# pipeline of iwslt15_en_de.sh on a corpus small enough for a CPU. Tokenize (sacremoses, or a simple
# fallback), word vocabularies (or --spm: sentencepiece), one LSTM encoder-decoder with dot attention
# per noising row and gamma_0 (SGD lr 1.0, clip 5, paper_halving with the 1% rule), validation
# perplexity picks gamma_0, fairseq-generate on test2016, BLEU with sacrebleu. Writes
# $RESULTS_DIR/multi30k.md (the paper has no Multi30k table; Table 4's IWSLT figures are shown for
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
#   ARCH          default noising_lstm_iwslt_en_de (2 x 512, dropout 0.2, reversed source);
#                 noising_lstm_seq2seq_tiny for tests
#   HIDDEN DROPOUT LAYERS   override the architecture's values
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
# Options: --spm sentencepiece instead of word vocabularies (output detokenized by sentencepiece);
# --dry-run prints the commands without running them; --help prints this text.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
NAME=multi30k.sh
SPM=${SPM:-0}
source "$ROOT/recipes/_common.sh"
parse_options "--spm" "$@"
WORK=$(realpath -m "${WORK:-runs/multi30k}")
RESULTS_DIR=${RESULTS_DIR:-$ROOT/results}
MULTI30K_URL=${MULTI30K_URL:-https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw}

check_env
detect_device

# 1. data
if [ -z "${MULTI30K_DIR:-}" ] && [ -f "$ROOT/../shared/data/multi30k/train.en" ]; then
  MULTI30K_DIR="$ROOT/../shared/data/multi30k"
fi
if [ -n "${MULTI30K_DIR:-}" ]; then
  for f in train val test; do for l in en de; do
    [ -f "$MULTI30K_DIR/$f.$l" ] || die "MULTI30K_DIR=$MULTI30K_DIR lacks $f.$l"
  done; done
else
  MULTI30K_DIR="$WORK/multi30k"
  for pair in train:train val:val test:test_2016_flickr; do
    for l in en de; do
      fetch "$MULTI30K_URL/${pair#*:}.$l.gz" "$MULTI30K_DIR/${pair%%:*}.$l.gz" \
        "Download Multi30k task 1 (train, val, test2016 .en/.de) yourself and set MULTI30K_DIR."
      if [ "$DRY_RUN" = 0 ] && [ ! -s "$MULTI30K_DIR/${pair%%:*}.$l" ]; then
        gunzip -c "$MULTI30K_DIR/${pair%%:*}.$l.gz" > "$MULTI30K_DIR/${pair%%:*}.$l.part"
        mv "$MULTI30K_DIR/${pair%%:*}.$l.part" "$MULTI30K_DIR/${pair%%:*}.$l"
      fi
    done
  done
fi
MULTI30K_DIR=$(realpath -m "$MULTI30K_DIR")
RAW="$WORK/raw"
fresh_step "$RAW" "$PY" "$ROOT/recipes/prepare_translation.py" plain --indir "$MULTI30K_DIR" --outdir "$RAW" \
  --src en --tgt de --split train=train --split valid=val --split test=test

SUFFIX=""; [ "$SPM" = 1 ] && SUFFIX=-spm
OUT="$RESULTS_DIR/multi30k$SUFFIX.md"
TITLE="Multi30k En-De (the translation pipeline of Table 4 on a small corpus)"
NOTES="Data: $MULTI30K_DIR (valid = val, test = test2016). The paper's columns are its IWSLT'15 figures (Table 4), not comparable numbers."
declare -A PAPER_PPL=([none]=8.84 [blank]=8.28 [unigram]=8.15 [kn]=7.92 [kn:source]=8.74 [kn:target]=8.14)
declare -A PAPER_BLEU=([none]=24.6 [blank]=25.3 [unigram]=25.5 [kn]=26.0 [kn:source]=24.8 [kn:target]=25.6)

source "$ROOT/recipes/_translation.sh"
