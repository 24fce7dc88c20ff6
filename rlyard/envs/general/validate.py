"""Prove every task gradable: its rubric loads; its reference answer (with its reference files)
scores >= 0.9 on the rule items, graded directly and played through the episode's own tools;
an empty answer scores 0. Judge items are left out: they need a judge, not a task check."""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlyard.envs.checks import check_every_task
from rlyard.envs.general.env import grade
from rlyard.envs.general.oracle import play_oracle, reference_files
from rlyard.envs.general.tasks import make_tasks
from rlyard.types import Task

PASS = 0.9


@dataclass
class Check:
    task_id: str
    base_reward: float | None  # an empty answer (expect 0)
    fixed_reward: float | None  # the reference answer on the rule items, the lower of direct and played (expect >= 0.9)
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error and self.base_reward == 0.0 and self.fixed_reward is not None and self.fixed_reward >= PASS


def graded_in(task: Task, files: dict[str, str], answer: str):
    workspace = Path(tempfile.mkdtemp(prefix="rlyard-general-check-"))
    try:
        source = Path(task.payload["dir"]) / "workspace"
        if source.is_dir():
            shutil.copytree(source, workspace, dirs_exist_ok=True)
        for path, content in files.items():
            (workspace / path).parent.mkdir(parents=True, exist_ok=True)
            (workspace / path).write_text(content)
        return grade(task, workspace, answer, rules_only=True)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def check_task(task: Task) -> Check:
    started = time.perf_counter()
    try:
        files = reference_files(task)
        reference = graded_in(task, files, files["answer.md"])
        empty = graded_in(task, {"answer.md": ""}, "")
        played = play_oracle(task)
        errors = [f"{name}: {r.info.get('error')}" for name, r in (("reference", reference), ("empty", empty), ("played", played))
                  if r.infra_error]
        failed = {k: v["why"] for k, v in reference.info.get("rubric", {}).items() if v["score"] < 1.0}
        if reference.value < PASS:
            errors.append(f"the reference answer scores {reference.value:.3f} on the rule items; failed: {failed}")
        if played.value < PASS:
            errors.append(f"the reference played through the tools scores {played.value:.3f}")
        if empty.value != 0.0:
            errors.append(f"an empty answer scores {empty.value:.3f}")
        return Check(task.id, empty.value, min(reference.value, played.value), "\n".join(errors), time.perf_counter() - started)
    except Exception as e:  # a broken task is reported, the others still run
        return Check(task.id, None, None, f"{type(e).__name__}: {e}", time.perf_counter() - started)


def validate(options: dict[str, Any] | None = None, task_ids: list[str] | None = None, jobs: int = 2,
             progress: Callable[[Check], None] | None = None, n: int | None = None) -> list[Check]:
    """Check every task of both splits (or only `task_ids`), `jobs` at a time; `n`: only the first n
    (`source: generated` has thousands; its first ones cover every schema, question, storage and output)."""
    if (options or {}).get("source") == "generated" and n is None:  # --task too: ids are looked up among the first n
        from rlyard.errors import ConfigError

        raise ConfigError("source: generated has 98,000 tasks; validate the first N of them with -n N "
                          "(e.g. -n 300; --task ids among them)")
    return check_every_task(make_tasks, check_task, options, task_ids, jobs, progress, n)
