"""The reference answer as an agent would send it: its files written with write_file, answer.md
last, then submit; a generated task (verifier/plan.json) is answered through the tools instead
(generated_oracle.py). `rlyard collect general` and validate use it."""
from __future__ import annotations

import json
import random
from pathlib import Path

from rlyard.types import Reward, Task


def reference_files(task: Task) -> dict[str, str]:
    """{workspace path: content} of the reference solution: reference_files/ and answer.md."""
    verifier = Path(task.payload["dir"]) / "verifier"
    files = {}
    extra = verifier / "reference_files"
    if extra.is_dir():
        files = {str(f.relative_to(extra)): f.read_text() for f in sorted(extra.rglob("*")) if f.is_file()}
    reference = verifier / "reference.md"
    if not reference.is_file():
        raise ValueError(f"general task {task.id} has no verifier/reference.md")
    files["answer.md"] = reference.read_text()
    return files


def oracle(task: Task, rng: random.Random | None = None) -> list[str]:
    """A generated task (it has verifier/plan.json) is answered through the tools (generated_oracle.py);
    a written task by writing its reference files."""
    if (Path(task.payload["dir"]) / "verifier" / "plan.json").is_file():
        from rlyard.envs.general.generated_oracle import oracle as generated_oracle

        return generated_oracle(task, rng or random.Random(task.id))
    calls = [{"name": "write_file", "arguments": {"path": path, "content": content}} for path, content in reference_files(task).items()]
    submit = {"name": "submit", "arguments": {"answer": "see answer.md"}}
    return ["".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls), f"<tool_call>{json.dumps(submit)}</tool_call>"]


def play_oracle(task: Task, rules_only: bool = True) -> Reward:
    """One episode that plays `oracle` through the environment's own tools, graded by `score`."""
    from dataclasses import replace

    from rlyard.envs.general.env import GeneralEnv

    from rlyard.envs.checks import play_replies

    return play_replies(GeneralEnv(), replace(task, payload={**task.payload, "rules_only": rules_only}),
                        oracle(task, random.Random(f"rlyard-validate|{task.id}")))
