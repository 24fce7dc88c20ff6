#!/usr/bin/env bash
# Train on the music family: check the grader against its data (every prompt's reference tune
# meets its constraints and a broken copy scores 0; the corpus sample passes the gate and lies
# in the bands), then train.
#   scripts/music/train.sh                                    # the embedded model, built-in prompts
#   scripts/music/train.sh model.name=Qwen/Qwen2.5-1.5B-Instruct train.steps=200
#   SOURCE=my_prompts.jsonl scripts/music/train.sh            # your own prompts (docs/music.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh; export PATH="$RLYARD_ENV/bin:$PATH"  # the environment setup.sh installed into
extra=() opts=()
if [ -n "${SOURCE:-}" ]; then
  extra+=("env.options.source=$SOURCE")
  opts+=(-o "source=$SOURCE")
fi
rlyard envs validate music "${opts[@]}"
rlyard train configs/music.yaml "${extra[@]}" "$@"
