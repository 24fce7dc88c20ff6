"""Prove every task sound: its tests fail at the base commit and pass with the reference fix.

A user's row that cannot load (its mirror, a patch, its environment) is reported as a failed
check with the reason, and the other rows are still checked.

Every check goes through the environment and grader that training uses, in the sandbox: a
workspace at the base commit is graded as it is (expect 0); then an "oracle" agent plays the
reference fix through the environment's own tools, once per harness arm (`git apply` through
bash; write_file per changed file on the edit arm), and each is graded (expect 1).
"""
from __future__ import annotations

import time
import json
from dataclasses import dataclass, replace
from typing import Any, Callable

from rlyard.envs.code.env import CodeEnv
from rlyard.envs.code.generate import GENERATED
from rlyard.envs.code.repo import apply_patch, touched_paths
from rlyard.envs.code.loaders import RowLoadError
from rlyard.envs.code.tasks import load_tasks
from rlyard.envs.checks import check_tasks
from rlyard.types import Reward, Task

GENERATED_CHECKS = 300  # generated tasks validated when no n is given (there are thousands)


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


def oracle_replies(task: Task, arm: str) -> list[str]:
    """The reference fix as an agent would send it: `git apply` in bash, or write_file per file."""
    p = task.payload
    if arm == "bash" or set(p["arms"][arm]) <= {"bash", "submit"}:
        command = f"git apply --whitespace=nowarn <<'RLYARD_PATCH_END'\n{p['patch']}RLYARD_PATCH_END"
        calls = [{"name": "bash", "arguments": {"command": command}}]
    else:
        base = p["source"]["files"]  # the edit arm is played on built-in tasks only (see check_task)
        fixed = apply_patch({path: base.get(path) for path in touched_paths(p["patch"])}, p["patch"])
        calls = [{"name": "write_file", "arguments": {"path": path, "content": text}} for path, text in fixed.items()]
    submit = {"name": "submit", "arguments": {"answer": "applied the reference fix"}}
    return ["".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls), f"<tool_call>{json.dumps(submit)}</tool_call>"]


def run_oracle(task: Task, arm: str) -> Reward:
    """One episode on `arm` that plays the reference fix through the environment's own tools."""
    forced = replace(task, payload={**task.payload, "arm_weights": {arm: 1.0}})
    env = CodeEnv()
    try:
        env.reset(forced)
        for reply in oracle_replies(forced, arm):
            result = env.step(reply)
            if result.done:
                break
            failed = [m["content"] for m in result.messages if "[exit code 0]" not in m["content"] and "wrote" not in m["content"]]
            if failed:
                return Reward(0.0, {}, {"error": f"a tool call failed: {failed[0]}"}, infra_error=True)
        return env.score()
    finally:
        env.close()


def check_task(task: Task, arms: tuple[str, ...] = ("bash", "edit")) -> Check:
    """Grade the base (expect 0), then the reference fix played on each arm (expect 1)."""
    started, env = time.perf_counter(), CodeEnv()
    try:
        env.reset(task)
        base = env.score()
        env.close()
        if base.infra_error:
            return Check(task.id, None, None, f"grading at base failed: {base.info.get('error')}{grader_output(base)}")
        fixed = [(arm, run_oracle(task, arm)) for arm in arms if task.payload["source"].get("files") or arm == "bash"]
        errors = [f"{arm}: {r.info.get('error')}{grader_output(r)}" for arm, r in fixed if r.infra_error]
        errors += [f"{arm}: tests fail with the reference fix{grader_output(r)}"
                   for arm, r in fixed if not r.infra_error and r.value != 1.0]
        if not errors and base.value != 0.0:
            errors.append(f"tests already pass at the base commit (the task shows nothing){grader_output(base)}")
        return Check(task.id, base.value, min(r.value for _, r in fixed), "\n".join(errors), time.perf_counter() - started)
    except Exception as e:  # a broken task is reported, the others still run
        return Check(task.id, None, None, f"{type(e).__name__}: {e}", time.perf_counter() - started)
    finally:
        env.close()


def grader_output(reward: Reward) -> str:
    """The grader's whole output (verify.py already bounds it), so the real error shows: a
    ModuleNotFoundError at collection sits at the top, not in the last lines."""
    output = str(reward.info.get("output", "")).rstrip()
    return f":\n{output}" if output else ""


def validate(options: dict[str, Any] | None = None, task_ids: list[str] | None = None, jobs: int = 2,
             progress: Callable[[Check], None] | None = None, n: int | None = None) -> list[Check]:
    """Check every task of both splits (or only `task_ids`), `jobs` at a time; a user's row that
    cannot load is a failed check carrying the reason, and the other rows are still checked.
    `n`: only the first n tasks; generated ones (`source: generated`, default n 300) are drawn
    half from each split, since their split is the held-out combinations, not eval_percent."""
    options = {**(options or {}), "eval_percent": 100}
    problems: list[RowLoadError] = []
    if options.get("source") == GENERATED:
        count = GENERATED_CHECKS if n is None else n
        tasks = load_tasks("train", count - count // 2, 0, problems, **options) + load_tasks("eval", count // 2, 0, problems, **options)
    else:
        tasks = load_tasks("eval", 10**9 if n is None else n, 0, problems, **options)
    refused = [Check(p.instance_id, None, None, f"the row cannot load: {p}") for p in problems
               if not task_ids or p.instance_id in task_ids]
    for check in refused:
        if progress:
            progress(check)
    known = {t.id for t in tasks} | {p.instance_id for p in problems}
    unknown = sorted(set(task_ids or ()) - known)
    if unknown:
        raise ValueError(f"unknown task id(s) {unknown}")
    asked = [i for i in task_ids or () if i in {t.id for t in tasks}]
    if task_ids and not asked:
        return refused
    return refused + check_tasks(tasks, asked or None, check_task, jobs, progress)
