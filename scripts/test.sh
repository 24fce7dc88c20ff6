#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "[test] ${PYTHON:-python3} -m pytest -q --timeout 900 $*"
exec "${PYTHON:-python3}" -m pytest -q --timeout 900 "$@"
