#!/usr/bin/env bash
# Train on the webdev family: check every task (its reference site scores fit >= 0.9 through the
# grader and through the tools, an empty page scores 0), then train. Screenshots of every graded
# page land in the run folder's screenshots/ next to trajectories.jsonl.
#   scripts/webdev/train.sh                                   # the embedded model, built-in tasks
#   scripts/webdev/train.sh model.name=Qwen/Qwen2.5-Coder-7B-Instruct train.steps=200
#   JUDGE_URL=http://localhost:8000/v1 JUDGE_MODEL=Qwen/Qwen2.5-VL-7B-Instruct scripts/webdev/train.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh; export PATH="$RLYARD_ENV/bin:$PATH"  # the environment setup.sh installed into
run_dir="${RUN_DIR:-runs/webdev-$(date +%Y%m%d-%H%M%S)}"
extra=("output.run_dir=$run_dir")
if [ -n "${JUDGE_URL:-}" ]; then
  extra+=("env.options.judge={base_url: $JUDGE_URL, model: ${JUDGE_MODEL:?set JUDGE_MODEL too}}")
fi
rlyard envs validate webdev
rlyard train configs/webdev.yaml "${extra[@]}" "$@"  # the run gives its folder to the tasks (task.metadata run_dir)
