"""What every family's `validate` shares: pick the tasks asked for, check them a few at a time,
play an oracle's replies through an environment."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from rlyard.types import Reward, Task

CheckT = TypeVar("CheckT")


def check_tasks(tasks: list[Task], task_ids: list[str] | None, check: Callable[[Task], CheckT], jobs: int = 2,
                progress: Callable[[CheckT], None] | None = None) -> list[CheckT]:
    """`check` on every task (or only `task_ids`, refused if unknown), `jobs` at a time, in order."""
    if task_ids:
        unknown = sorted(set(task_ids) - {t.id for t in tasks})
        if unknown:
            raise ValueError(f"unknown task id(s) {unknown}")
        tasks = [t for t in tasks if t.id in task_ids]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        checks = []
        for result in pool.map(check, tasks):
            checks.append(result)
            if progress:
                progress(result)
    return checks


def check_every_task(make_tasks: Callable[..., list[Task]], check: Callable[[Task], CheckT], options: dict | None,
                     task_ids: list[str] | None, jobs: int = 2, progress: Callable[[CheckT], None] | None = None,
                     n: int | None = None) -> list[CheckT]:
    """`check` on every task of both splits (eval_percent 100 puts them all in one), or only `task_ids`;
    `n`: only the first n of them (a generated source)."""
    tasks = make_tasks("eval", 10**9 if n is None else n, 0, **{**(options or {}), "eval_percent": 100})
    return check_tasks(tasks, task_ids, check, jobs, progress)


def play_replies(env, task: Task, replies: list[str]) -> Reward:
    """One episode of fixed replies (an oracle's) through the environment's own tools, graded by
    its `score` on the final workspace, as a policy's would be; the environment is closed after."""
    try:
        env.reset(task)
        for reply in replies:
            if env.step(reply).done:
                break
        return env.score()
    finally:
        env.close()
