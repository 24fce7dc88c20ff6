#!/usr/bin/env bash
# The agentic quickstart: collect -> SFT -> RL -> eval on the two-lookup `files` task
# (configs/agentic_quickstart.yaml), embedded SmolLM2-135M, CPU, offline: the shared learning
# recipe (scripts/learn.py) with 64 demonstrations.
#   scripts/agentic_quickstart.sh                       # one RL seed; held-out success after each stage
#   RL_SEEDS="0 1 2" scripts/agentic_quickstart.sh      # three RL runs from the same SFT run
#   OUT=runs/aq DEMOS=128 THREADS=2 scripts/agentic_quickstart.sh model.name=HuggingFaceTB/SmolLM2-360M-Instruct
# Extra arguments are config overrides for every stage. Each stage's held-out evaluation (greedy,
# eval.size tasks of the eval split, never used for demonstrations) goes to $OUT/eval_<stage>.json
# and the table to $OUT/summary.json.
set -euo pipefail
export DEMOS=${DEMOS:-64} OUT=${OUT:-runs/agentic_quickstart-$(date +%Y%m%d-%H%M%S)}
exec "$(dirname "$0")/learn.sh" configs/agentic_quickstart.yaml "$@"
