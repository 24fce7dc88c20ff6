"""Prove every task sound: its tests fail at the base commit and pass with the reference fix.

Both checks go through the environment and grader that training uses, in the sandbox: a
workspace at the base commit is graded as it is (expect 0), then a fresh one gets the reference
patch applied by `git apply` inside the sandbox and is graded again (expect 1).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from rlyard.envs.code.env import CodeEnv
from rlyard.envs.code.tasks import make_tasks
from rlyard.types import Task


@dataclass
class Check:
    task_id: str
    base_reward: float | None
    fixed_reward: float | None
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error and self.base_reward == 0.0 and self.fixed_reward == 1.0


def check_task(task: Task) -> Check:
    started, env = time.perf_counter(), CodeEnv()
    try:
        env.reset(task)
        base = env.score()
        if base.infra_error:
            return Check(task.id, None, None, f"grading at base failed: {base.info.get('error')}")
        env.reset(task)
        applied = env.sandbox.run(["git", "apply", "--whitespace=nowarn", "-"], stdin=task.payload["patch"], timeout_s=60)
        if applied.exit_code != 0:
            return Check(task.id, base.value, None, f"reference fix does not apply: {applied.text.strip()[:300]}")
        fixed = env.score()
        error = "" if not fixed.infra_error else f"grading the fix failed: {fixed.info.get('error')}"
        if not error and fixed.value != 1.0:
            error = "tests fail with the reference fix:\n" + str(fixed.info.get("output", ""))[-1500:]
        elif not error and base.value != 0.0:
            error = "tests already pass at the base commit (the task shows nothing)"
        return Check(task.id, base.value, fixed.value, error, time.perf_counter() - started)
    except Exception as e:  # a broken task is reported, the others still run
        return Check(task.id, None, None, f"{type(e).__name__}: {e}", time.perf_counter() - started)
    finally:
        env.close()


def validate(options: dict[str, Any] | None = None, task_ids: list[str] | None = None, jobs: int = 2,
             progress: Callable[[Check], None] | None = None) -> list[Check]:
    """Check every task of both splits (or only `task_ids`), `jobs` at a time."""
    options = {**(options or {}), "eval_percent": 100}
    tasks = make_tasks("eval", 10**9, 0, **options)
    if task_ids:
        unknown = sorted(set(task_ids) - {t.id for t in tasks})
        if unknown:
            raise ValueError(f"unknown task id(s) {unknown}")
        tasks = [t for t in tasks if t.id in task_ids]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        checks = []
        for check in pool.map(check_task, tasks):
            checks.append(check)
            if progress:
                progress(check)
    return checks
