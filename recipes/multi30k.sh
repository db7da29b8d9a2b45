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
          SPM_JOINT="$SPM_JOINT" SEED="$SEED" EXTRA_ARGS="$EXTRA_ARGS" GEN_ARGS="$GEN_ARGS")
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

# 2. words (tokenized; the NWORDS most frequent per language) or, with --spm, sentencepiece pieces;
#    then binarize
if [ "$SPM" = 1 ]; then
  SEG=$WORK/spm$SPM_VOCAB
  JOINT=()
  VOCAB_ARGS=()
  if [ "$SPM_JOINT" = 1 ]; then SEG+=-joint; JOINT=(--joint); VOCAB_ARGS=(--joined-dictionary); fi
  prepare "$SEG" "$PY" recipes/prepare_translation.py spm-dir --indir "$RAW" --outdir "$SEG" \
    --src en --tgt de --vocab-size "$SPM_VOCAB" "${JOINT[@]}"
  DATA=$SEG/data-bin
  RUN_DIR=$WORK/runs-$(basename "$SEG")-$MODEL
  POST_ARGS=(--post-process sentencepiece)   # fairseq-generate prints detokenized text
  SCORE_ARGS=(--tokenizer none)
else
  SEG=$WORK/tok
  prepare "$SEG" "$PY" recipes/prepare_translation.py tokenize-dir --indir "$RAW" --outdir "$SEG" \
    --src en --tgt de --tokenizer "$TOKENIZER"
  DATA=$WORK/data-bin-w$NWORDS
  VOCAB_ARGS=(--nwordssrc "$NWORDS" --nwordstgt "$NWORDS")
  RUN_DIR=$WORK/runs-w$NWORDS-$MODEL
  POST_ARGS=()
  SCORE_ARGS=(--tokenizer "$TOKENIZER" --tok-ref "$SEG/test.de")
fi
prepare "$DATA" "$BIN/fairseq-preprocess" --source-lang en --target-lang de \
  --trainpref "$SEG/train" --validpref "$SEG/valid" --testpref "$SEG/test" \
  "${VOCAB_ARGS[@]}" --destdir "$DATA" --workers 2

# 3. train one model per row and gamma_0 (none once); a row is a scheme, or scheme:side to noise
#    one side only. The optimisation protocol (OPTIMIZER: the paper's SGD, or Adam for a
#    Transformer) is translation_protocol in recipes/_common.sh; either keeps the best per-token
#    nll_loss. A cut-off run resumes from checkpoint_last.pt.
MODEL_ARGS=(--arch "$ARCH")
if [ -n "${HIDDEN:-}" ]; then MODEL_ARGS+=(--hidden-size "$HIDDEN"); fi
if [ -n "${DROPOUT:-}" ]; then MODEL_ARGS+=(--dropout "$DROPOUT"); fi
if [ -n "${LAYERS:-}" ]; then MODEL_ARGS+=(--num-layers "$LAYERS"); fi
translation_protocol
read -r -a EXTRA <<< "$EXTRA_ARGS"
RUNS=()
for row in $ROWS; do
  side=both
  if [[ $row == *:* ]]; then side=${row#*:}; fi
  for gamma in $(gammas_of "$row"); do
    RUNS+=("$RUN_DIR/${row/:/-}-g$gamma")
    train "${RUNS[-1]}" "$BIN/fairseq-train" "$DATA" --user-dir fairseq_noising --task noised_translation \
      --source-lang en --target-lang de \
      --noise-scheme "${row%%:*}" --noise-gamma "$gamma" --noise-side "$side" \
      "${MODEL_ARGS[@]}" "${PROTOCOL_ARGS[@]}" --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 \
      --max-epoch "$MAX_EPOCH" --seed "$SEED" --no-epoch-checkpoints --save-dir "${RUNS[-1]}" \
      --log-format simple --log-interval 100 "${DEVICE_ARGS[@]}" "${EXTRA[@]}"
  done
done

# 4. validation perplexity of every run (per target token); the gamma_0 of each row with the lowest
#    one decodes test (beam BEAM), scored with sacrebleu on detokenized output against the raw
#    references (and, for words, tokenized BLEU)
VALIDATE=("$BIN/fairseq-validate" "$DATA" --user-dir fairseq_noising --task noised_translation
          --source-lang en --target-lang de --valid-subset valid
          --batch-size 64 --required-batch-size-multiple 1 "${DEVICE_ARGS[@]}")
read -r -a GEN <<< "$GEN_ARGS"
for row in $ROWS; do
  runs=()
  for gamma in $(gammas_of "$row"); do
    runs+=("$RUN_DIR/${row/:/-}-g$gamma")
    evaluate "${runs[-1]}/valid.eval.log" "${VALIDATE[@]}" --path "${runs[-1]}/checkpoint_best.pt"
  done
  best=$(best_run "${runs[@]}")
  evaluate "$best/test.gen" "$BIN/fairseq-generate" "$DATA" --user-dir fairseq_noising --task noised_translation \
    --source-lang en --target-lang de --path "$best/checkpoint_best.pt" --gen-subset test \
    --beam "$BEAM" --batch-size 64 --required-batch-size-multiple 1 "${POST_ARGS[@]}" "${DEVICE_ARGS[@]}" "${GEN[@]}"
  evaluate "$best/test.bleu" "$PY" recipes/prepare_translation.py score --generate-output "$best/test.gen" \
    --hyps "$best/test.hyp" --detok "$best/test.detok" --lang de --ref "$RAW/test.de" "${SCORE_ARGS[@]}"
done

# 5. the results page (our table beside Table 4's IWSLT figures, every command), the training logs
#    and the chosen runs' test translations
write_results multi30k --out "$RESULTS_DIR/multi30k$PAGE_SUFFIX.md" --device "$DEVICE" --data "$MULTI30K_DIR" \
  --settings "${SETTINGS[@]}" --prepared "$RAW" "$SEG" "$DATA" --runs "${RUNS[@]}"
