#!/usr/bin/env bash
# cyber learns on generated C targets: collect -> base eval -> SFT -> eval -> RL seeds -> eval
# (scripts/learn.py: DEMOS, RL_SEEDS, OUT, THREADS, BUILTIN, RESULT), configs/cyber_learn.yaml.
#   scripts/cyber/learn.sh
#   BUILTIN="env.options.source=null" RL_SEEDS="0 1 2" RESULT=bench/results/learn_cyber.json scripts/cyber/learn.sh
# DEMOS defaults to 128 here (not 256): an oracle episode runs 3-4 sandboxed commands and a graded run.
export DEMOS="${DEMOS:-128}"
exec "$(dirname "$0")/../learn.sh" configs/cyber_learn.yaml "$@"
