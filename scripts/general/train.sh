#!/usr/bin/env bash
# Train on the general family: check every task (its reference answer passes its rule items,
# an empty answer scores 0), then train.
#   scripts/general/train.sh                                          # the embedded model, built-in tasks
#   scripts/general/train.sh env.options.judge.base_url=http://127.0.0.1:8001/v1 env.options.judge.model=my-judge
#   SOURCE=./my_tasks scripts/general/train.sh                        # your own task folders (docs/general.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh; export PATH="$RLYARD_ENV/bin:$PATH"  # the environment setup.sh installed into
extra=() opts=()
if [ -n "${SOURCE:-}" ]; then
  extra+=("env.options.source=$SOURCE")
  opts+=(-o "source=$SOURCE")
fi
rlyard envs validate general "${opts[@]}"
rlyard train configs/general.yaml "${extra[@]}" "$@"
