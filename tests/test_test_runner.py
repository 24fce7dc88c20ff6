"""The test command watches its own wall-time budget and records where the time goes.

scripts/run_tests.py prints the total and warns past the budget (never fails for it); under
pytest-xdist the conftest hooks keep a module on one worker (a test of the few spread modules is
its own unit) and `--durations-json` writes every module's seconds and every spread test's
(bench/test_durations.py commits them; the next run starts the slowest units first).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "scripts" / "run_tests.py"


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUNNER), *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_the_budget_is_watched_with_a_warning_not_a_failure(tmp_path):
    (tmp_path / "test_tiny.py").write_text("import time\n\ndef test_sleeps():\n    time.sleep(0.2)\n")
    over = run(["test_tiny.py", "-p", "no:cacheprovider"], tmp_path, RLYARD_TEST_WORKERS="0", RLYARD_TEST_BUDGET_S="0.1")
    assert over.returncode == 0, over.stdout + over.stderr
    assert "1 passed" in over.stdout
    assert "[test] total" in over.stdout and "WARNING: the suite took" in over.stdout
    within = run(["test_tiny.py", "-p", "no:cacheprovider"], tmp_path, RLYARD_TEST_WORKERS="0", RLYARD_TEST_BUDGET_S="3600")
    assert within.returncode == 0 and "[test] total" in within.stdout
    assert "WARNING" not in within.stdout


def test_a_failing_suite_keeps_its_exit_code(tmp_path):
    (tmp_path / "test_fails.py").write_text("def test_fails():\n    assert 1 == 2\n")
    result = run(["test_fails.py", "-p", "no:cacheprovider"], tmp_path, RLYARD_TEST_WORKERS="0")
    assert result.returncode == 1 and "1 failed" in result.stdout


def test_parallel_run_keeps_modules_whole_and_records_durations(tmp_path):
    out = tmp_path / "durations.json"
    spread = "tests/envs/test_general_tasks.py"  # one of conftest's SPREAD_MODULES: a test per unit of work
    result = run(["tests/test_layout.py", "tests/test_provenance.py", spread, "--durations-json", str(out), "-p", "no:cacheprovider",
                  "-v", "-v"], ROOT, RLYARD_TEST_WORKERS="2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["outcomes"].get("passed", 0) == record["tests"] > 0
    assert set(record["module_seconds"]) == {"tests/test_layout.py", "tests/test_provenance.py", spread}
    assert all(row["seconds"] >= 0 for row in record["slowest"]) and len(record["slowest"]) <= 30
    spread_tests = record["spread_test_seconds"]  # conftest orders the spread module's tests by their own seconds
    assert spread_tests and all(t.startswith(spread + "::") for t in spread_tests)
    assert abs(sum(spread_tests.values()) - record["module_seconds"][spread]) <= 0.01 * len(spread_tests) + 0.01  # each rounded
    workers = {}
    for line in result.stdout.splitlines():  # "[gw0] [ 50%] PASSED tests/test_layout.py::test_x" (-q -v -v)
        if line.startswith("[gw") and " PASSED " in line:
            workers.setdefault(line.split(" PASSED ")[1].split("::")[0], set()).add(line.split("]")[0])
    assert set(workers) == set(record["module_seconds"]), workers
    assert all(len(w) == 1 for module, w in workers.items() if module != spread), workers
