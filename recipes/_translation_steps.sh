# Steps 2-4 of the translation recipes (recipes/iwslt15_en_de.sh, recipes/multi30k.sh), which
# source this file once step 1 has put the raw pairs in $RAW/{train,valid,test}.{en,de}: segment
# and binarize, train one model per row and gamma_0, validate every run and decode test with each
# row's chosen one. It reads the recipe's settings (see either recipe's header), PAGE_TABLE and
# PAGE_DATA (the results page's table and the data it names), and sets PAGE (write_results's
# arguments but the runs) and RUNS for step 5, the results page.

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
PAGE=("$PAGE_TABLE" --out "$RESULTS_DIR/$PAGE_TABLE$PAGE_SUFFIX.md" --device "$DEVICE" --data "$PAGE_DATA"
      --settings "${SETTINGS[@]}" --prepared "$RAW" "$SEG" "$DATA")

# 3. train one model per row and gamma_0 (none once), JOBS at a time; a row is a scheme, or
#    scheme:side to noise one side only. The optimisation protocol (OPTIMIZER: the paper's SGD, or
#    Adam for a Transformer) is translation_protocol in recipes/_common.sh; either keeps the best
#    per-token nll_loss. Each run's validation perplexity (per target token) is measured as soon
#    as it ends. A cut-off run resumes from checkpoint_last.pt. The page is rewritten as they go.
MODEL_ARGS=(--arch "$ARCH")
if [ -n "${HIDDEN:-}" ]; then MODEL_ARGS+=(--hidden-size "$HIDDEN"); fi
if [ -n "${DROPOUT:-}" ]; then MODEL_ARGS+=(--dropout "$DROPOUT"); fi
if [ -n "${LAYERS:-}" ]; then MODEL_ARGS+=(--num-layers "$LAYERS"); fi
translation_protocol
read -r -a EXTRA <<< "$EXTRA_ARGS"
VALIDATE=("$BIN/fairseq-validate" "$DATA" --user-dir fairseq_noising --task noised_translation
          --source-lang en --target-lang de --valid-subset valid
          --batch-size 64 --required-batch-size-multiple 1 "${DEVICE_ARGS[@]}")
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
    evaluate "${RUNS[-1]}/valid.eval.log" "${VALIDATE[@]}" --path "${RUNS[-1]}/checkpoint_best.pt"
  done
done
run_queued "${PAGE[@]}" --runs "${RUNS[@]}"

# 4. the gamma_0 of each row with the lowest validation perplexity decodes test (beam BEAM), scored
#    with sacrebleu on detokenized output against the raw references (and, for words, tokenized
#    BLEU); a row whose runs all failed has none
read -r -a GEN <<< "$GEN_ARGS"
for row in $ROWS; do
  runs=()
  for gamma in $(gammas_of "$row"); do runs+=("$RUN_DIR/${row/:/-}-g$gamma"); done
  best=$(best_run "${runs[@]}")
  if [ -z "$best" ]; then continue; fi
  evaluate "$best/test.gen" "$BIN/fairseq-generate" "$DATA" --user-dir fairseq_noising --task noised_translation \
    --source-lang en --target-lang de --path "$best/checkpoint_best.pt" --gen-subset test \
    --beam "$BEAM" --batch-size 64 --required-batch-size-multiple 1 "${POST_ARGS[@]}" "${DEVICE_ARGS[@]}" "${GEN[@]}"
  evaluate "$best/test.bleu" "$PY" recipes/prepare_translation.py score --generate-output "$best/test.gen" \
    --hyps "$best/test.hyp" --detok "$best/test.detok" --lang de --ref "$RAW/test.de" "${SCORE_ARGS[@]}"
done
run_queued "${PAGE[@]}" --runs "${RUNS[@]}"
