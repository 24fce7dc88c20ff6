#!/usr/bin/env bash
# webdev learns on generated page specs: collect -> base eval -> SFT -> eval -> RL seeds -> eval
# (scripts/learn.py: DEMOS, RL_SEEDS, OUT, THREADS, BUILTIN, RESULT), configs/webdev_learn.yaml.
#   scripts/webdev/learn.sh
# The figure samples (greedy SFT is already at 1.000: docs/webdev.md):
#   DEMOS=128 RL_SEEDS="0 1 2" EVAL_SAMPLES=2 EVAL_GREEDY=0 VERDICT="sampled_mean_reward sampled_mean_gate sampled_accuracy" \
#     BUILTIN="env.options.source=null" RESULT=bench/results/learn_webdev.json scripts/webdev/learn.sh
exec "$(dirname "$0")/../learn.sh" configs/webdev_learn.yaml "$@"
