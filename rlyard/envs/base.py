"""The environment contract: `reset` / `step` / `score`, and a registry of families.

An environment never sees sampling, advantages or batching; it turns a `Task` into messages,
reacts to the policy's replies and finally scores the episode. Single-turn families end after
the first reply; multi-turn families keep returning tool messages until `done`.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from rlyard.types import Message, Reward, Task


@dataclass
class StepResult:
    messages: list[Message] = field(default_factory=list)  # tool / env messages to append
    done: bool = True
    reason: str = "done"  # why the episode ended when done: "done", "no_tool_call", "submitted" ...


class Environment(Protocol):
    def reset(self, task: Task) -> list[Message]: ...

    def step(self, reply: str) -> StepResult: ...

    def score(self) -> Reward: ...

    def close(self) -> None: ...


Verifier = Callable[[str, Task], Reward]


class SingleTurnEnv:
    """One prompt, one reply, one verdict: the shape of `arith` and `countdown`."""

    def __init__(self, verify: Verifier):
        self._verify = verify
        self._task: Task | None = None
        self._reply = ""

    def reset(self, task: Task) -> list[Message]:
        self._task, self._reply = task, ""
        return list(task.prompt)

    def step(self, reply: str) -> StepResult:
        self._reply = reply
        return StepResult(done=True)

    def score(self) -> Reward:
        if self._task is None:
            raise RuntimeError("score() called before reset()")
        return self._verify(self._reply, self._task)

    def close(self) -> None:
        pass


class ToolEnv:
    """The `step` of a tool-using family: run the reply's tool calls, answer with their output.

    A reply without a tool call ends the episode ("no_tool_call"); the `submit` tool, or the
    command `submit <answer>` (bash_block's way), ends it with an answer ("submitted"); malformed
    calls are answered with a readable error and counted. With a `guard`, refused calls are
    answered "Permission denied" and do not run. Subclasses set format, toolbox and guard in reset.
    """

    format: str = "hermes"
    toolbox = None  # rlyard.agent.tools.ToolBox
    guard = None  # rlyard.agent.guard.Guard
    submitted: str | None = None
    calls = malformed = 0
    workspace = None  # a Path the episode owns; removed by close()
    task = None

    def begin(self, task: Task, prefix: str) -> Path:
        """A new episode: the previous workspace removed, counters cleared, a fresh empty workspace."""
        self.close()
        self.task, self.submitted, self.malformed, self.calls = task, None, 0, 0
        self.workspace = Path(tempfile.mkdtemp(prefix=prefix))
        return self.workspace

    def close(self) -> None:
        if self.workspace is not None:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None

    def step(self, reply: str) -> StepResult:
        from rlyard.agent.toolcalls import format_tool_error, parse_tool_calls

        parsed = parse_tool_calls(reply, self.format, self.toolbox.specs())
        if not parsed.calls and not parsed.errors:
            return StepResult(done=True, reason="no_tool_call")
        self.malformed += len(parsed.errors)
        outputs = [format_tool_error(parsed.errors)] if parsed.errors else []
        for call in parsed.calls:
            self.calls += 1
            command = str(call.arguments.get("command", "")).strip() if call.name == "bash" else ""
            if call.name == "submit" or SUBMIT_COMMAND.match(command):
                self.submitted = str(call.arguments.get("answer", command[len("submit"):].strip()))
                return StepResult(done=True, reason="submitted")
            refusal = self.guard.check(call.name, call.arguments) if self.guard else None
            content = refusal or self.toolbox.call(call.name, call.arguments).content
            outputs.append(f"[{call.name}]\n{content}")
        return StepResult(messages=[{"role": "tool", "content": "\n\n".join(outputs)}], done=False)


SUBMIT_COMMAND = re.compile(r"submit(\s|$)")


@dataclass(frozen=True)
class Family:
    """What a family folder registers: how to make its tasks and its environments."""

    name: str
    make_tasks: Callable[..., list[Task]]  # (split: "train" | "eval", n: int, seed: int, **options)
    make_env: Callable[[], Environment]
    verify: Verifier | None  # a reply-only check; None where the grade needs the episode's state (code)
    description: str = ""
    multi_turn: bool = False  # True: episodes go through the agent loop (tools, several turns)
    validate: Callable[..., list] | None = None  # (options, task_ids, jobs, progress) -> checks with .ok (`rlyard envs validate`)


_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    _FAMILIES[family.name] = family
    return family


def get_family(name: str) -> Family:
    _load_builtin_families()
    if name not in _FAMILIES:
        raise KeyError(f"unknown environment {name!r}; registered: {sorted(_FAMILIES)}")
    return _FAMILIES[name]


def family_names() -> list[str]:
    _load_builtin_families()
    return sorted(_FAMILIES)


def _load_builtin_families() -> None:
    import rlyard.envs.arith  # noqa: F401  (registers on import)
    import rlyard.envs.code  # noqa: F401
    import rlyard.envs.countdown  # noqa: F401
    import rlyard.envs.files  # noqa: F401
