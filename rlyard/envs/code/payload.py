"""The task payload: what a code task carries, whichever source it came from.

Both task sources build the same payload: `tasks.py` from the built-in set, `loaders.py` from
the rows users bring (SWE-bench style, the recipe's records). This module holds what they share,
so that neither imports the other's internals (`tasks.py` imports `loaders.py`, never the reverse).

A task's payload holds everything the environment and grader need, computed once on the host
from trusted data: how to build the base repository, the issue text, the test patch, the test
command and timeout, the reference fix, and `graded_files` (each path the test patch touches,
as it must read at grading: the base version with the test patch applied). The test command is
the verifier script `grade_runner.py`, which a test patch adds as `RUNNER_PATH`.
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from rlyard.agent.toolcalls import shell_quote
from rlyard.envs.code.grade_runner import runner_source
from rlyard.envs.code.repo import apply_patch, touched_paths
from rlyard.envs.splits import split_of as shared_split_of

RUNNER_PATH = ".rlyard/grade.py"
RUNNER = runner_source()
TEST_DIRS = ("tests", "test", "testing")


def split_of(instance_id: str, eval_percent: int) -> str:
    return shared_split_of("code", instance_id, eval_percent)


def trusted_test_paths(test_files: list[str], listing: list[str]) -> list[str]:
    """Paths reset to their trusted version at grading besides the test files themselves.

    The policy must not change what the hidden tests import or which fixtures they get: the
    `conftest.py` of every folder above a test file (absent ones stay absent), and every Python
    file of the test folder (`tests/`, `test/`, `testing/`) that holds it. `listing`: the base tree.
    """
    out: list[str] = []
    for path in test_files:
        parts = PurePosixPath(path).parts[:-1]
        out += ["/".join([*parts[:i], "conftest.py"]) for i in range(len(parts) + 1)]
        top = next((i for i, part in enumerate(parts) if part in TEST_DIRS), None)
        if top is not None:
            prefix = "/".join(parts[:top + 1]) + "/"
            out += [p for p in listing if p.startswith(prefix) and p.endswith(".py")]
    return [p for p in dict.fromkeys(out) if p not in test_files]


def runner_command(tests: list[str], python: str = "python3") -> str:
    """The verifier command over test files / node ids; `python` may be a per-repository venv's."""
    return f"{python} -I {RUNNER_PATH} " + " ".join(shell_quote(t) for t in tests)


def payload(*, instance_id: str, repo: str, source: dict, problem_statement: str, test_patch: str, patch: str,
            test_command: str, timeout_s: float, base_files: dict[str, str | None], difficulty: str = "",
            extra_reset: list[str] = (), expected_tests: list[str] | None = None, xfail_ok: list[str] = (),
            ro_binds: list[str] = (), graded_files: dict[str, str | None] | None = None) -> dict[str, Any]:
    """A task payload with `graded_files` worked out: the test patch applied to the base versions,
    plus `extra_reset` paths kept at their base version (visible tests, the files of PASS_TO_PASS).

    `expected_tests`: the exact node ids that must each be reported passed (None: not a runner
    command, the exit code decides); `xfail_ok`: those that may be xfailed instead (SWE-bench's
    PASS_TO_PASS); `ro_binds`: host folders the sandbox sees read-only (a per-repository venv);
    `graded_files`: the test patch applied, when the caller already has it (generated tasks: no
    `git apply` per task).
    """
    hidden = touched_paths(test_patch)
    graded = dict(graded_files) if graded_files is not None else apply_patch(base_files, test_patch)
    graded |= {p: base_files[p] for p in extra_reset if p not in graded}
    return {"instance_id": instance_id, "repo": repo, "source": source, "problem_statement": problem_statement,
            "test_patch": test_patch, "patch": patch, "test_command": test_command, "timeout_s": timeout_s,
            "hidden_paths": hidden, "graded_files": graded, "difficulty": difficulty,
            "expected_tests": None if expected_tests is None else list(expected_tests), "xfail_ok": list(xfail_ok),
            "ro_binds": list(ro_binds)}
