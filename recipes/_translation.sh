# The translation half of iwslt15_en_de.sh and multi30k.sh: tokenize (or sentencepiece),
# binarize, train one encoder-decoder per (row, gamma_0), validation perplexity, gamma_0 chosen on
# it, decode test with fairseq-generate, BLEU with sacrebleu, results table. Sourced, not run.
# Expects (besides _common.sh's variables): RAW (folder with raw {train,valid,test}.{en,de}),
# WORK, OUT, TITLE, NOTES, PAPER_PPL / PAPER_BLEU (associative arrays row -> figure; may be empty)
# and the settings below (each with a default here).
SRC=en
TGT=de
ROWS=${ROWS:-none blank unigram kn kn:source kn:target}
GAMMAS=${GAMMAS:-0.1 0.2 0.3}
ARCH=${ARCH:-noising_lstm_iwslt_en_de}
BATCH_SIZE=${BATCH_SIZE:-128}
MAX_EPOCH=${MAX_EPOCH:-50}
HALVINGS=${HALVINGS:-8}
BEAM=${BEAM:-5}
NWORDS=${NWORDS:-50000}
TOKENIZER=${TOKENIZER:-auto}
SPM=${SPM:-0}
SPM_VOCAB=${SPM_VOCAB:-16000}
SPM_JOINT=${SPM_JOINT:-0}
SEED=${SEED:-1}
EXTRA_ARGS=${EXTRA_ARGS:-}
read -r -a EXTRA <<< "$EXTRA_ARGS"
GEN_ARGS=${GEN_ARGS:-}
read -r -a GEN <<< "$GEN_ARGS"

# 2. tokenize (word vocabularies) or sentencepiece
if [ "$SPM" = 1 ]; then
  joint=(); [ "$SPM_JOINT" = 1 ] && joint=(--joint)
  SEG="$WORK/spm$SPM_VOCAB${joint:+-joint}"
  fresh_step "$SEG" "$PY" "$ROOT/recipes/prepare_translation.py" spm-dir --indir "$RAW" --outdir "$SEG" \
    --src $SRC --tgt $TGT --vocab-size "$SPM_VOCAB" "${joint[@]}"
  DATA="$SEG/data-bin"
  TAG=$(basename "$SEG")
  vocab_args=(); [ "$SPM_JOINT" = 1 ] && vocab_args=(--joined-dictionary)
  SEGMENT="sentencepiece (unigram, $SPM_VOCAB pieces, $([ "$SPM_JOINT" = 1 ] && echo joint || echo "one model per language"))"
else
  SEG="$WORK/tok"
  fresh_step "$SEG" "$PY" "$ROOT/recipes/prepare_translation.py" tokenize-dir --indir "$RAW" --outdir "$SEG" \
    --src $SRC --tgt $TGT --tokenizer "$TOKENIZER"
  DATA="$WORK/data-bin-w$NWORDS"
  TAG=w$NWORDS
  vocab_args=(--nwordssrc "$NWORDS" --nwordstgt "$NWORDS")
  SEGMENT="words, top $NWORDS per language, tokenizer $(cat "$SEG/tokenizer" 2>/dev/null || echo "$TOKENIZER")"
fi
fresh_step "$DATA" "$BIN/fairseq-preprocess" --source-lang $SRC --target-lang $TGT \
  --trainpref "$SEG/train" --validpref "$SEG/valid" --testpref "$SEG/test" \
  "${vocab_args[@]}" --destdir "$DATA" --workers 2

# 3. train one model per (row, gamma_0); a row is a scheme, or scheme:side for one side only.
#    Loss summed over target tokens, averaged over sentences (Luong et al.; per-token averaging would
#    make lr 1.0 ~15x smaller per token); the 1% rule then reads the per-token nll_loss.
MODEL_ARGS=(--arch "$ARCH")
[ -n "${HIDDEN:-}" ] && MODEL_ARGS+=(--hidden-size "$HIDDEN")
[ -n "${DROPOUT:-}" ] && MODEL_ARGS+=(--dropout "$DROPOUT")
[ -n "${LAYERS:-}" ] && MODEL_ARGS+=(--num-layers "$LAYERS")
RUNS="$WORK/runs-$TAG-$ARCH${HIDDEN:+-h$HIDDEN}"
gammas_of() { if [ "${1%%:*}" = none ]; then echo 0; else echo "$GAMMAS"; fi; }
run_dir() { echo "$RUNS/${1/:/-}-g$2"; }
declare -A TRAIN_CMD
for row in $ROWS; do
  scheme=${row%%:*}; side=both; [[ "$row" == *:* ]] && side=${row#*:}
  for gamma in $(gammas_of "$row"); do
    save=$(run_dir "$row" "$gamma")
    cmd=("$BIN/fairseq-train" "$DATA" --user-dir "$PLUGIN" --task noised_translation
         --source-lang $SRC --target-lang $TGT
         --noise-scheme "$scheme" --noise-gamma "$gamma" --noise-side "$side"
         "${MODEL_ARGS[@]}" --criterion cross_entropy --sentence-avg --best-checkpoint-metric nll_loss
         --optimizer sgd --lr 1.0 --clip-norm 5.0 --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1
         --lr-scheduler paper_halving --halving-threshold 0.01 --halvings "$HALVINGS" --stop-min-lr 0
         --max-epoch "$MAX_EPOCH" --seed "$SEED" --no-epoch-checkpoints --save-dir "$save"
         --log-format simple --log-interval 100 "${DEVICE_ARGS[@]}" "${EXTRA[@]}")
    TRAIN_CMD[$row-$gamma]=$(show_cmd "${cmd[@]}")
    train_step "$save" "${cmd[@]}"
  done
done

# 4. validation perplexity of every run; test BLEU for the gamma_0 chosen on it
validate_cmd() {  # checkpoint
  VALIDATE=("$BIN/fairseq-validate" "$DATA" --user-dir "$PLUGIN" --task noised_translation
            --source-lang $SRC --target-lang $TGT --path "$1" --valid-subset valid
            --batch-size 64 --required-batch-size-multiple 1 "${DEVICE_ARGS[@]}")
}
generate_cmd() {  # checkpoint
  post=(); [ "$SPM" = 1 ] && post=(--post-process sentencepiece)
  GENERATE=("$BIN/fairseq-generate" "$DATA" --user-dir "$PLUGIN" --task noised_translation
            --source-lang $SRC --target-lang $TGT --path "$1" --gen-subset test
            --beam "$BEAM" --batch-size 64 --required-batch-size-multiple 1 "${post[@]}"
            "${DEVICE_ARGS[@]}" "${GEN[@]}")
}
PT="$ROOT/recipes/prepare_translation.py"
score_cmds() {  # checkpoint: the commands that turn generate output into BLEU
  local c=$1
  HYPS=("$PY" "$PT" hyps --generate-output "$c.test.gen" --output "$c.test.hyp")
  if [ "$SPM" = 1 ]; then
    DETOK=(cp "$c.test.hyp" "$c.test.detok")
  else
    DETOK=("$PY" "$PT" detokenize --lang $TGT --tokenizer "$(cat "$SEG/tokenizer" 2>/dev/null || echo "$TOKENIZER")"
           --input "$c.test.hyp" --output "$c.test.detok")
  fi
  BLEU=("$PY" "$PT" bleu --hyp "$c.test.detok" --ref "$RAW/test.$TGT")
  TOKBLEU=("$PY" "$PT" bleu --tokenize none --hyp "$c.test.hyp" --ref "$SEG/test.$TGT")
}
if [ "$DRY_RUN" = 1 ]; then
  for row in $ROWS; do
    for gamma in $(gammas_of "$row"); do
      validate_cmd "$(run_dir "$row" "$gamma")/checkpoint_best.pt"; echo "+ $(show_cmd "${VALIDATE[@]}")"
    done
    c="$(run_dir "$row" BEST)/checkpoint_best.pt"
    generate_cmd "$c"; score_cmds "$c"
    echo "+ $(show_cmd "${GENERATE[@]}") > $(rel_path "$c.test.gen")"
    echo "+ $(show_cmd "${HYPS[@]}")"; echo "+ $(show_cmd "${DETOK[@]}")"; echo "+ $(show_cmd "${BLEU[@]}")"
  done
  echo "(dry run: nothing was run; a real run writes $(rel_path "$OUT"))"
  exit 0
fi

valid_ppl() {  # checkpoint
  validate_cmd "$1"
  cached_value "$1.valid.ppl" "$1" bash -c '"$@" 2>&1 | tee "$0" >&2; sed -n "s/.*valid on .valid. subset.* ppl \([0-9.]*\).*/\1/p" "$0" | tail -1' \
    "$1.valid.log" "${VALIDATE[@]}"
}
test_bleu() {  # checkpoint: prints "BLEU TOKBLEU"
  generate_cmd "$1"; score_cmds "$1"
  cached_value "$1.test.bleu" "$1" bash -c '
    set -eo pipefail
    n=$1; shift; gen=("${@:1:$n}"); shift "$n"
    "${gen[@]}" > "$0.test.gen.part" 2> "$0.test.gen.log" || { tail -20 "$0.test.gen.log" >&2; exit 1; }
    mv "$0.test.gen.part" "$0.test.gen"; tail -2 "$0.test.gen.log" >&2
    n=$1; shift; "${@:1:$n}" >&2; shift "$n"
    n=$1; shift; "${@:1:$n}" >&2; shift "$n"
    n=$1; shift; b=$("${@:1:$n}"); shift "$n"
    t=$("$@")
    echo "$b $t"' "$1" \
    "${#GENERATE[@]}" "${GENERATE[@]}" "${#HYPS[@]}" "${HYPS[@]}" "${#DETOK[@]}" "${DETOK[@]}" \
    "${#BLEU[@]}" "${BLEU[@]}" "${TOKBLEU[@]}"
}

declare -A PPL BEST_GAMMA BLEU_OF TOKBLEU_OF EPOCHS
for row in $ROWS; do
  best=""
  for gamma in $(gammas_of "$row"); do
    dir=$(run_dir "$row" "$gamma")
    PPL[$row-$gamma]=$(valid_ppl "$dir/checkpoint_best.pt")
    EPOCHS[$row-$gamma]=$(grep -c "valid on 'valid' subset" "$dir/train.log" || true)
    if [ -z "$best" ] || awk -v a="${PPL[$row-$gamma]}" -v b="${PPL[$row-$best]}" 'BEGIN{exit !(a<b)}'; then
      best=$gamma
    fi
  done
  BEST_GAMMA[$row]=$best
  scores=$(test_bleu "$(run_dir "$row" "$best")/checkpoint_best.pt")
  read -r b t <<< "$scores"
  BLEU_OF[$row]=$b; TOKBLEU_OF[$row]=$t
done

# 5. the training logs (and the test translations of the chosen runs) beside the results file
LOGS_DIR="${OUT%.md}-logs"
mkdir -p "$LOGS_DIR"
for row in $ROWS; do
  for gamma in $(gammas_of "$row"); do
    dir=$(run_dir "$row" "$gamma")
    cp "$dir/train.log" "$LOGS_DIR/${row/:/-}-g$gamma.train.log"
  done
  dir=$(run_dir "$row" "${BEST_GAMMA[$row]}")
  if [ -f "$dir/checkpoint_best.pt.test.detok" ]; then
    cp "$dir/checkpoint_best.pt.test.detok" "$LOGS_DIR/${row/:/-}-g${BEST_GAMMA[$row]}.test.detok"
  fi
done

# 6. results
declare -A LABEL=([none]="dropout, no noising" [blank]="blank noising" [unigram]="unigram noising"
  [kn]="bigram Kneser-Ney" [kn:source]="bigram Kneser-Ney, source only" [kn:target]="bigram Kneser-Ney, target only"
  [ad]="absolute discounting" [uniform]="uniform noising" [mkn]="modified Kneser-Ney")
mkdir -p "$(dirname "$OUT")"
{
  echo "# $TITLE"
  echo
  echo "Generated by \`recipes/$NAME\` on $(date -u '+%Y-%m-%d %H:%M UTC') (device: $DEVICE)."
  echo "Settings: ARCH=$ARCH HIDDEN=${HIDDEN:-default} DROPOUT=${DROPOUT:-default} LAYERS=${LAYERS:-default}"\
       "BATCH_SIZE=$BATCH_SIZE MAX_EPOCH=$MAX_EPOCH HALVINGS=$HALVINGS GAMMAS=\"$GAMMAS\" BEAM=$BEAM SEED=$SEED"\
       "EXTRA_ARGS=\"$EXTRA_ARGS\" GEN_ARGS=\"$GEN_ARGS\"; vocabulary: $SEGMENT."
  echo "Perplexity: fairseq-validate on the validation set with checkpoint_best.pt (per target token,"
  echo "</s> included). BLEU: sacrebleu (13a) on test, detokenized hypotheses against the raw references;"
  echo "tok BLEU: sacrebleu --tokenize none, tokenized hypotheses against the tokenized references"
  echo "(word-level only). gamma_0 chosen per row on validation perplexity."
  [ -n "${NOTES:-}" ] && rel_text "$NOTES"
  echo
  echo "| Scheme | gamma_0 | Perplexity | BLEU | tok BLEU | Paper perplexity | Paper BLEU |"
  echo "|---|---|---|---|---|---|---|"
  for row in $ROWS; do
    g=${BEST_GAMMA[$row]}
    tb=${TOKBLEU_OF[$row]}; [ "$SPM" = 1 ] && tb="—"
    echo "| ${LABEL[$row]:-$row} | $g | ${PPL[$row-$g]} | ${BLEU_OF[$row]} | $tb | ${PAPER_PPL[$row]:-—} | ${PAPER_BLEU[$row]:-—} |"
  done
  echo
  echo "Validation perplexity of every run:"
  echo
  echo "| row | gamma_0 | Perplexity | epochs validated |"
  echo "|---|---|---|---|"
  for row in $ROWS; do
    for gamma in $(gammas_of "$row"); do
      echo "| $row | $gamma | ${PPL[$row-$gamma]} | ${EPOCHS[$row-$gamma]} |"
    done
  done
  echo
  echo "Training logs of every run and the detokenized test translations of the chosen gamma_0:"
  echo "[\`$(basename "$LOGS_DIR")/\`]($(basename "$LOGS_DIR")/)."
  echo
  echo "## Commands"
  echo
  echo "Preparation:"
  echo
  [ -f "$RAW/.done" ] && echo "    $(rel_text "$(cat "$RAW/.done")")"
  echo "    $(rel_text "$(cat "$SEG/.done")")"
  echo "    $(rel_text "$(cat "$DATA/.done")")"
  echo
  echo "Training (one run per row and gamma_0):"
  echo
  for row in $ROWS; do
    for gamma in $(gammas_of "$row"); do echo "    ${TRAIN_CMD[$row-$gamma]}"; done
  done
  echo
  echo "Evaluation (per checkpoint; decoding and scoring for the chosen gamma_0):"
  echo
  c=RUN/checkpoint_best.pt
  validate_cmd "$c"; generate_cmd "$c"; score_cmds "$c"
  echo "    $(show_cmd "${VALIDATE[@]}")"
  echo "    $(show_cmd "${GENERATE[@]}") > $c.test.gen"
  echo "    $(show_cmd "${HYPS[@]}")"; echo "    $(show_cmd "${DETOK[@]}")"
  echo "    $(show_cmd "${BLEU[@]}")"; echo "    $(show_cmd "${TOKBLEU[@]}")"
} > "$OUT.part"
mv "$OUT.part" "$OUT"
echo
cat "$OUT"
