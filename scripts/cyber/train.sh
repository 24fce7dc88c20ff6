#!/usr/bin/env bash
# Train on the cyber family: check every target in the sandbox (it builds; its reference PoC
# crashes exactly as described; its seed and an empty input do not), then train.
#   scripts/cyber/train.sh                                    # the embedded model, built-in targets
#   scripts/cyber/train.sh model.name=Qwen/Qwen2.5-Coder-7B-Instruct train.steps=200
#   SOURCE=arvo_rows.jsonl scripts/cyber/train.sh             # your own targets (docs/cyber.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh; export PATH="$RLYARD_ENV/bin:$PATH"  # the environment setup.sh installed into
extra=() opts=()
if [ -n "${SOURCE:-}" ]; then
  extra+=("env.options.source=$SOURCE")
  opts+=(-o "source=$SOURCE")
fi
rlyard envs validate cyber "${opts[@]}"
rlyard train configs/cyber.yaml "${extra[@]}" "$@"
