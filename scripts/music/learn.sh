#!/usr/bin/env bash
# music learns on generated constraint prompts: collect -> base eval -> SFT -> eval -> RL seeds -> eval
# (scripts/learn.py: DEMOS, RL_SEEDS, OUT, THREADS, BUILTIN, RESULT), configs/music_learn.yaml.
#   scripts/music/learn.sh
#   BUILTIN="env.options.source=null" RL_SEEDS="0 1 2" RESULT=bench/results/learn_music.json scripts/music/learn.sh
exec "$(dirname "$0")/../learn.sh" configs/music_learn.yaml "$@"
