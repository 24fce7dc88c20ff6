#!/usr/bin/env bash
# general learns on generated data questions: collect -> base eval -> SFT -> eval -> RL seeds -> eval
# (scripts/learn.py: DEMOS, RL_SEEDS, OUT, THREADS, BUILTIN, RESULT), configs/general_learn.yaml.
#   scripts/general/learn.sh
#   BUILTIN="env.options.source=null env.options.rules_only=true" RL_SEEDS="0 1 2" \
#     RESULT=bench/results/learn_general.json scripts/general/learn.sh
exec "$(dirname "$0")/../learn.sh" configs/general_learn.yaml "$@"
