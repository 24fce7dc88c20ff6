"""Prove every task sound with the grader training uses: its reference site, graded straight
from the task folder and played through the episode's tools (write_file, submit), reaches fit
0.9 or more with no gate failure; an empty page (dist/index.html with an empty body) scores 0.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlyard.envs.checks import check_every_task
from rlyard.envs.webdev.tasks import make_tasks
from rlyard.envs.webdev.verify import grade_dist
from rlyard.types import Task

MIN_FIT = 0.9
EMPTY_PAGE = "<!doctype html><html><head><title></title></head><body></body></html>\n"


@dataclass
class Check:
    task_id: str
    base_reward: float | None  # the empty page (expect 0)
    fixed_reward: float | None  # the reference site, the lower of direct and through the tools (expect >= 0.9)
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error and self.base_reward == 0.0 and self.fixed_reward is not None and self.fixed_reward >= MIN_FIT


def check_task(task: Task) -> Check:
    from rlyard.envs.webdev.oracle import play_oracle

    started = time.perf_counter()
    try:
        errors = []
        direct = grade_dist(Path(task.payload["site"]), task.payload, task.id)
        played = play_oracle(task)
        for name, reward in (("reference", direct), ("reference through the tools", played)):
            if reward.infra_error:
                return Check(task.id, None, None, f"grader: {reward.info.get('error')}", time.perf_counter() - started)
            if reward.value < MIN_FIT:
                failed = [c for c in reward.info.get("checks", []) if c["score"] < 1]
                errors.append(f"the {name} scores {reward.value:.3f} ({reward.info.get('reason', '')}); checks below 1: {failed}")
        with tempfile.TemporaryDirectory(prefix="rlyard-webdev-empty-") as folder:
            (Path(folder) / "index.html").write_text(EMPTY_PAGE)
            empty = grade_dist(Path(folder), task.payload, f"{task.id}-empty")
        if empty.value != 0.0:
            errors.append(f"an empty page scores {empty.value:.3f}: {empty.info.get('checks')}")
        return Check(task.id, empty.value, round(min(direct.value, played.value), 4), "\n".join(errors),
                     time.perf_counter() - started)
    except Exception as e:  # a broken task is reported, the others still run
        return Check(task.id, None, None, f"{type(e).__name__}: {e}", time.perf_counter() - started)


def validate(options: dict[str, Any] | None = None, task_ids: list[str] | None = None, jobs: int = 2,
             progress: Callable[[Check], None] | None = None, n: int | None = None) -> list[Check]:
    """Check every task of both splits (or only `task_ids`; `n`: the first n, for a generated
    source), `jobs` at a time (a browser per thread)."""
    return check_every_task(make_tasks, check_task, options, task_ids, jobs, progress, n)
