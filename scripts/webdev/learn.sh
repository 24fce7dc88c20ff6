#!/usr/bin/env bash
# webdev learns on generated page specs: collect -> base eval -> SFT -> eval -> RL seeds -> eval
# (scripts/learn.py: DEMOS, RL_SEEDS, OUT, THREADS, BUILTIN, RESULT), configs/webdev_learn.yaml.
#   scripts/webdev/learn.sh
#   BUILTIN="env.options.source=null" RL_SEEDS="0 1 2" RESULT=bench/results/learn_webdev.json scripts/webdev/learn.sh
exec "$(dirname "$0")/../learn.sh" configs/webdev_learn.yaml "$@"
