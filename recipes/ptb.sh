#!/usr/bin/env bash
# Penn Treebank, Table 2 of the paper: the rows of recipes/config/ptb_$SIZE.yaml (none, and blank,
# unigram and kn at two gamma_0 each) with the paper's protocol, side by side, then the page.
#
#   bash recipes/setup.sh && PTB_DIR=../shared/data/ptb SIZE=medium bash recipes/ptb.sh [OVERRIDE...]
#
# OVERRIDEs go to fairseq-hydra-train, e.g. hydra.launcher.n_jobs=4 (rows at once; default one per
# core), optimization.stop_time_hours=0.4 (a time budget per row: leave time for the evaluation),
# hydra/launcher=submitit_slurm hydra.launcher.partition=P, 'task={noise_scheme:kn,noise_gamma:0.3}'.
# Environment: PTB_DIR (ptb.{train,valid,test}.txt; default: downloaded from the Zaremba et al.
# repository into WORK), SIZE (small, medium or large; default medium), WORK (default runs/ptb),
# RESULTS_DIR (default results), MPS=1 (a CUDA MPS daemon for the rows), TIME_BUDGET (hours per row)
# and EVAL_RESERVE (hours of it kept for the evaluation; default a fifth, at least 2 min), VENV,
# DATA_ONLY=1 (prepare WORK/data-bin and stop; without PTB_DIR a binarized WORK/data-bin is enough).
set -euo pipefail
cd "$(dirname "$0")/.."
source recipes/_sweep.sh
SIZE=${SIZE:-medium}
WORK=${WORK:-runs/ptb}
[ -f "recipes/config/ptb_$SIZE.yaml" ] || die "SIZE must be small, medium or large, got '$SIZE'"

# 1. data: PTB_DIR's text files, else downloaded into WORK/ptb; binarized into WORK/data-bin
ptb_data

# 2. the table: every row trains, evaluates itself (stateful fairseq-eval-lm of checkpoint_best.pt on
#    valid and test) and rewrites the page; gamma_0 is chosen per scheme on validation
sweep "ptb_$SIZE" "$WORK/$SIZE" "${RESULTS_DIR:-results}/ptb-$SIZE.md" "task.data=$WORK/data-bin" "$@"
