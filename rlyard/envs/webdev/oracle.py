"""The reference site as an agent would send it: one write_file call per file into dist/, then
submit. `rlyard collect webdev` and validate play it through the episode's own tools."""
from __future__ import annotations

import json
import random
from pathlib import Path

from rlyard.types import Reward, Task


def site_files(task: Task) -> dict[str, str]:
    """{path under dist/: text} of the task's reference site."""
    root = Path(task.payload["site"])
    if not (root / "index.html").is_file():
        raise ValueError(f"webdev task {task.id} has no reference site ({root}/index.html)")
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def oracle(task: Task, rng: random.Random | None = None) -> list[str]:
    files = site_files(task)
    order = list(files)
    if rng is not None:  # the entry page first or last: either way the site is whole at submit
        rng.shuffle(order)
    calls = [{"name": "write_file", "arguments": {"path": f"dist/{name}", "content": files[name]}} for name in order]
    submit = {"name": "submit", "arguments": {"answer": "done"}}
    return ["".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls), f"<tool_call>{json.dumps(submit)}</tool_call>"]


def play_oracle(task: Task) -> Reward:
    """One episode that plays `oracle` through the environment's own tools, graded by `score`."""
    from rlyard.envs.webdev.env import WebdevEnv

    from rlyard.envs.checks import play_replies

    return play_replies(WebdevEnv(), task, oracle(task))
