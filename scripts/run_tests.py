"""Run the test suite in parallel and watch its wall-time budget (scripts/test.sh calls this).

The suite runs under pytest-xdist with one worker per core (at most 4; RLYARD_TEST_WORKERS sets
it, 0 runs in this process). Each test module stays on one worker, so its module-scoped fixtures
are built once (tests/conftest.py groups them and starts the slowest modules first, from
bench/results/test_durations.json). At the end it prints the wall seconds and warns, without
failing, when they pass the budget (RLYARD_TEST_BUDGET_S, default 900 s: CI's limit is 30 min,
and half of it is kept as room to grow). Extra arguments go to pytest.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

DEFAULT_BUDGET_S = 900.0


def workers() -> int:
    wanted = os.environ.get("RLYARD_TEST_WORKERS")
    if wanted is not None:
        return int(wanted)
    return max(1, min(4, len(os.sched_getaffinity(0))))


def pytest_command(args: list[str], n: int) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "--timeout", "900", "--durations=30"]
    if n > 0:
        command += ["-n", str(n), "--dist", "loadscope", "--no-loadscope-reorder"]
    return command + args


def main(args: list[str]) -> int:
    n = workers()
    budget = float(os.environ.get("RLYARD_TEST_BUDGET_S", DEFAULT_BUDGET_S))
    command = pytest_command(args, n)
    print(f"[test] {' '.join(command[1:])}  ({n} workers, budget {budget:.0f} s)", flush=True)
    start = time.monotonic()
    code = subprocess.call(command)
    seconds = time.monotonic() - start
    print(f"[test] total {seconds:.1f} s wall ({seconds / 60:.1f} min), pytest exit code {code}", flush=True)
    if seconds > budget:
        print(f"[test] WARNING: the suite took {seconds:.0f} s, past its budget of {budget:.0f} s "
              f"({budget / 60:.0f} min); CI stops at 30 min. Make the slowest tests above cheaper.", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
