#!/usr/bin/env bash
# Every family's learning recipe: collect -> base eval -> SFT -> eval -> RL seeds -> eval, with
# summary.json (scripts/learn.py has the details and the environment variables).
#   scripts/learn.sh configs/code_learn.yaml                 # what scripts/code/learn.sh runs
#   RL_SEEDS="0 1 2" OUT=runs/learn-code scripts/learn.sh configs/code_learn.yaml train.steps=20
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh; export PATH="$RLYARD_ENV/bin:$PATH"  # the environment setup.sh installed into
exec "$RLYARD_PY" scripts/learn.py "$@"
