"""Prove every target sound, in the sandbox, with the grader training uses: the pristine build
builds; the reference PoC crashes with exactly the expected sanitizer, type and function
(reward 1); the benign seed and an empty input do not crash (reward 0, no sanitizer report).
An oracle agent then plays the reference PoC through the episode's own tools (write_file and
bash, then submit) and must score 1 too. For a generated target (`source: generated`) the
measured report must also be the one its catalogue entry names (the bug kind's sanitizer and
error type, in the drawn function), and the oracle writes its own PoC from the spec.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlyard.envs.cyber.generate import Spec, expected_report
from rlyard.envs.cyber.verify import grade_bytes
from rlyard.envs.cyber.tasks import make_tasks
from rlyard.envs.cyber.targets import Target
from rlyard.envs.checks import check_every_task
from rlyard.types import Task


@dataclass
class Check:
    task_id: str
    base_reward: float | None  # the worst of the seed and the empty input (expect 0, and no crash)
    fixed_reward: float | None  # the reference PoC, graded directly and through the tools (expect 1)
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error and self.base_reward == 0.0 and self.fixed_reward == 1.0


def check_task(task: Task) -> Check:
    from rlyard.envs.cyber.oracle import play_oracle

    started, target = time.perf_counter(), Target(**task.payload["target"])
    try:
        if not target.poc or not Path(target.poc).is_file():
            return Check(task.id, None, None, "the target has no reference PoC to validate", time.perf_counter() - started)
        timeout = float(task.payload["timeout_s"])
        poc = grade_bytes(target, Path(target.poc).read_bytes(), timeout)
        if poc.reward.infra_error:
            return Check(task.id, None, None, f"grader: {poc.reward.info.get('error')}", time.perf_counter() - started)
        benign = [("seed", Path(target.seed).read_bytes())] if target.seed and Path(target.seed).is_file() else []
        benign.append(("empty input", b""))
        errors = []
        if poc.reward.value != 1.0:
            errors.append(f"the reference PoC gives {poc.reward.info.get('report')} (exit {poc.reward.info.get('exit_code')}), "
                          f"expected {target.expected}:\n{poc.output.strip()}")
        worst = 0.0
        for name, data in benign:
            verdict = grade_bytes(target, data, timeout)
            worst = max(worst, verdict.reward.value)
            if verdict.reward.components.get("crashed") or verdict.reward.info.get("report"):
                errors.append(f"the {name} crashes: {verdict.reward.info.get('report')}:\n{verdict.output.strip()}")
        if "spec" in task.payload:
            catalogue = expected_report(Spec(**task.payload["spec"]))
            if target.expected != catalogue:
                errors.append(f"the measured report {target.expected} is not the catalogue's {catalogue}")
        played = play_oracle(task)
        if played.value != 1.0:
            errors.append(f"the reference PoC played through the tools scores {played.value}: {played.info.get('error', played.components)}")
        fixed = min(poc.reward.value, played.value)
        return Check(task.id, worst, fixed, "\n".join(errors), time.perf_counter() - started)
    except Exception as e:  # a broken target is reported, the others still run
        return Check(task.id, None, None, f"{type(e).__name__}: {e}", time.perf_counter() - started)


def validate(options: dict[str, Any] | None = None, task_ids: list[str] | None = None, jobs: int = 2,
             progress: Callable[[Check], None] | None = None, n: int | None = None) -> list[Check]:
    """Check every target of both splits (or only `task_ids`; or the first `n`), `jobs` at a time.
    A generated source has no end: without `n` its first 200 are checked."""
    if n is None and (options or {}).get("source") == "generated":
        n = 200
    return check_every_task(make_tasks, check_task, options, task_ids, jobs, progress, n)
