#!/usr/bin/env bash
# music learns on generated constraint prompts: collect -> base eval -> SFT -> eval -> RL seeds -> eval
# (scripts/learn.py: DEMOS, RL_SEEDS, OUT, THREADS, BUILTIN, RESULT), configs/music_learn.yaml.
# Greedy tunes loop (the same bar again and again), so music is judged on two sampled tunes a
# held-out prompt at rollout.temperature (EVAL_SAMPLES=2), with no greedy tune (EVAL_GREEDY=0: it
# took half the eval time and scored about 0), on reward, gate and constraints. 448 demonstrations:
# with 160 the SFT policy copied the beat count and still wrote bars of the wrong length (docs/music.md).
#   scripts/music/learn.sh
#   BUILTIN="env.options.source=null" BUILTIN_SIZE=30 RL_SEEDS="0 1 2" RESULT=bench/results/learn_music.json scripts/music/learn.sh
export DEMOS="${DEMOS:-448}" EVAL_SAMPLES="${EVAL_SAMPLES:-2}" EVAL_GREEDY="${EVAL_GREEDY:-0}"
export VERDICT="${VERDICT:-sampled_mean_reward sampled_gate_pass sampled_constraint_share}"
exec "$(dirname "$0")/../learn.sh" configs/music_learn.yaml "$@"
