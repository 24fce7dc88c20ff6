"""What every family's `validate` shares: pick the tasks asked for, check them a few at a time."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from rlyard.types import Task

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
