#!/usr/bin/env bash
# Train on the code family: check the task set in the sandbox, measure the base model, train.
#   scripts/code/train.sh                                   # the embedded model, built-in tasks
#   scripts/code/train.sh model.name=Qwen/Qwen2.5-Coder-1.5B-Instruct train.steps=200
#   SOURCE=swe.jsonl MIRRORS=./mirrors scripts/code/train.sh  # your own SWE-bench rows
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh; export PATH="$RLYARD_ENV/bin:$PATH"  # the environment setup.sh installed into
extra=()
if [ -n "${SOURCE:-}" ]; then
  extra+=("env.options.source=$SOURCE")
  [ -n "${MIRRORS:-}" ] && extra+=("env.options.mirrors=$MIRRORS")
  opts=(-o "source=$SOURCE"); [ -n "${MIRRORS:-}" ] && opts+=(-o "mirrors=$MIRRORS")
  rlyard envs validate code "${opts[@]}"
else
  rlyard envs validate code
fi
rlyard train configs/code.yaml "${extra[@]}" "$@"
