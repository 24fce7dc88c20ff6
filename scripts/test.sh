#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite in the environment setup.sh installed into;
# .ci/run calls exactly this. Tests run in parallel (pytest-xdist, RLYARD_TEST_WORKERS workers,
# default: one per core, at most 4). Prints the slowest tests and the wall time, and warns when
# the run passes its 15-minute budget. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/env.sh
export PATH="$RLYARD_ENV/bin:$PATH"  # rlyard and pytest of that environment first, as if activated
exec "$RLYARD_PY" scripts/run_tests.py "$@"
