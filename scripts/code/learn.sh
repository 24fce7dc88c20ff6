#!/usr/bin/env bash
# code learns on generated bug-fix tasks: collect -> base eval -> SFT -> eval -> RL seeds -> eval
# (scripts/learn.py: DEMOS, RL_SEEDS, OUT, THREADS, BUILTIN, RESULT), configs/code_learn.yaml.
#   scripts/code/learn.sh
#   BUILTIN="env.options.source=null" RL_SEEDS="0 1 2" RESULT=bench/results/learn_code.json scripts/code/learn.sh
exec "$(dirname "$0")/../learn.sh" configs/code_learn.yaml "$@"
