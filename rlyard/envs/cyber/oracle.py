"""The reference PoC as an agent would send it: written with write_file (as base64 text, since a
PoC is bytes), decoded with bash, then submitted. `rlyard collect cyber` and validate use it."""
from __future__ import annotations

import base64
import json
import random
from pathlib import Path

from rlyard.types import Reward, Task


def oracle(task: Task, rng: random.Random | None = None) -> list[str]:
    poc = task.payload["target"].get("poc")
    if not poc or not Path(poc).is_file():
        raise ValueError(f"cyber target {task.id} has no reference PoC")
    encoded = base64.b64encode(Path(poc).read_bytes()).decode()
    calls = [{"name": "write_file", "arguments": {"path": "poc.b64", "content": encoded}},
             {"name": "bash", "arguments": {"command": "base64 -d poc.b64 > poc.bin && ./target poc.bin; echo exit $?"}}]
    submit = {"name": "submit", "arguments": {"answer": "poc.bin"}}
    return ["".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls), f"<tool_call>{json.dumps(submit)}</tool_call>"]


def play_oracle(task: Task) -> Reward:
    """One episode that plays `oracle` through the environment's own tools, graded by `score`."""
    from rlyard.envs.cyber.env import CyberEnv

    from rlyard.envs.checks import play_replies

    return play_replies(CyberEnv(), task, oracle(task))
