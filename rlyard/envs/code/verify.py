"""Grading a `code` episode: reset the test paths, apply the test patch, run the test command.

The reward is 1.0 when rlyard's runner reports every expected test passed (or, for a user's
own test command, when it exits 0) in the sandbox, else 0.0. Steps 1 and 2 of the
production recipe (reset every path the test patch touches to the base commit, then apply the
test patch) are done without the workspace's git, which the policy could have rigged (hooks,
smudge filters, replaced objects): the host applies the test patch once, at setup, to the
base versions it read from trusted data, and at grading a small program in the sandbox removes
whatever now sits at those paths and writes the expected files, checking every byte. If that
fails (a path the policy made unwritable, say), the reward is 0 with `testbed_corrupted`.
"""
from __future__ import annotations

import json
import math
import secrets
from dataclasses import replace

from rlyard.agent.loop import cut_middle
from rlyard.envs.code.grade_runner import read_verdict
from rlyard.envs.code.repo import RepoError
from rlyard.envs.code.screen import screen_workspace
from rlyard.sandbox import Sandbox, SandboxError
from rlyard.types import Reward

# Runs in the sandbox with `python3 -I` (a json.py or os.py the policy left in the workspace is
# never imported): {path: text or null} on stdin; replaces each path, then checks it.
_RESET = r'''
import json, os, shutil, sys
expected = json.load(sys.stdin)
def remove(path):
    if os.path.islink(path) or os.path.isfile(path): os.unlink(path)
    elif os.path.isdir(path): shutil.rmtree(path)
for path, text in expected.items():
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if os.path.islink(prefix) or (os.path.lexists(prefix) and not os.path.isdir(prefix)):
            os.unlink(prefix)
    remove(path)
    if text is not None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f: f.write(text)
for path, text in expected.items():
    if text is None:
        ok = not os.path.lexists(path)
    else:
        ok = os.path.isfile(path) and not os.path.islink(path) and open(path, "rb").read() == text.encode()
    if not ok:
        print(f"testbed_corrupted: {path} could not be reset"); sys.exit(3)
print("rlyard-reset-ok")
'''


def grade(sandbox: Sandbox, graded_files: dict[str, str | None], test_command: str, timeout_s: float,
          timeout_is_infra: bool = True, expected_tests: list[str] | None = None, xfail_ok: list[str] = (),
          base_source: dict | None = None) -> Reward:
    """Reset + test patch (`graded_files`: each touched path's expected text), then the tests.

    With `expected_tests` the command is rlyard's runner: it gets a fresh token and the exact
    node ids on stdin, and only its verdict line carrying that token counts. Without, the exit
    code decides (the recipe's own test commands). `base_source`: the task's trusted source; the
    policy's changes against it are screened first (screen.py), and a finding scores 0 as `reward_hack`.
    """
    if base_source is not None:
        try:
            findings = screen_workspace(sandbox.workspace, base_source, set(graded_files))
        except (RepoError, OSError):  # the screen is defence in depth; the run-time guards still stand
            findings = []
        if findings:
            return Reward(0.0, {"passed": 0.0, "testbed_corrupted": 0.0, "reward_hack": 1.0},
                          {"error": f"reward_hack: static_screen: {findings[0]}", "screen": findings,
                           "output": "static screen of the changes:\n" + "\n".join(findings)})
    try:
        reset = sandbox.run(["python3", "-I", "-c", _RESET], timeout_s=60, stdin=json.dumps(graded_files))
    except SandboxError as e:
        return Reward(0.0, {"passed": 0.0}, {"error": f"sandbox: {e}"}, infra_error=True)
    if reset.exit_code != 0 or "rlyard-reset-ok" not in reset.text:
        return Reward(0.0, {"passed": 0.0, "testbed_corrupted": 1.0},
                      {"error": "testbed_corrupted", "output": cut_middle(reset.text, 2000)})
    token = secrets.token_hex(16)
    trusted = sorted(p for p, text in graded_files.items() if text is not None)  # the runner's audit hook trusts these
    stdin = json.dumps({"token": token, "expect": expected_tests, "xfail_ok": list(xfail_ok), "trusted": trusted}) \
        if expected_tests is not None else None
    limits = replace(sandbox.limits, wall_s=max(sandbox.limits.wall_s, timeout_s), cpu_s=max(sandbox.limits.cpu_s, math.ceil(timeout_s)))
    try:
        result = sandbox.run(["/bin/bash", "-c", test_command], timeout_s=timeout_s, stdin=stdin, limits=limits)
    except SandboxError as e:
        return Reward(0.0, {"passed": 0.0}, {"error": f"sandbox: {e}"}, infra_error=True)
    output = cut_middle(result.text, 8000)
    if result.timed_out:
        return Reward(0.0, {"passed": 0.0, "verifier_timeout": 1.0},
                      {"error": f"test command timed out after {timeout_s:.0f} s", "output": output}, infra_error=timeout_is_infra)
    if expected_tests is None:
        passed = float(result.exit_code == 0)
        return Reward(passed, {"passed": passed, "testbed_corrupted": 0.0, "reward_hack": 0.0},
                      {"exit_code": result.exit_code, "output": output})
    verdict = read_verdict(result.stdout.decode("utf-8", "replace"), token)
    if verdict is None:
        return Reward(0.0, {"passed": 0.0, "testbed_corrupted": 0.0, "reward_hack": 0.0},
                      {"exit_code": result.exit_code, "error": "the runner printed no verdict", "output": output})
    if verdict.get("infra"):
        return Reward(0.0, {"passed": 0.0}, {"error": verdict["infra"], "output": output}, infra_error=True)
    passed = float(verdict.get("passed") is True and not verdict.get("hack"))
    info = {"exit_code": result.exit_code, "output": output, "verdict": verdict}
    if verdict.get("hack"):
        info["error"] = f"reward_hack: {verdict['hack']}: {verdict.get('reason', '')}"
    return Reward(passed, {"passed": passed, "testbed_corrupted": 0.0, "reward_hack": float(bool(verdict.get("hack")))}, info)

