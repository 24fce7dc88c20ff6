"""The `step` shared by tool-using families: parse the reply's tool calls, run them, answer.

It lives apart from `rlyard.environment.base` because it needs the agent's tool-call parser, while the
agent loop needs only the `Environment` protocol: keeping them apart keeps the imports one-way.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

from rlyard.agent.toolcalls import format_tool_error, parse_tool_calls, render_tool_specs
from rlyard.environment import StepResult
from rlyard.environment.outcomes import policy_line, tool_error
from rlyard.sandbox.mounts import remove_workspace
from rlyard.types import Task


class ToolEnv:
    """The `step` of a tool-using family: run the reply's tool calls, answer with their output.

    A reply without a tool call ends the episode ("no_tool_call"); the `submit` tool, or the
    command `submit <answer>` (bash_block's way), ends it with an answer ("submitted"); malformed
    calls are answered with a readable error and counted. With a `guard`, refused calls are
    answered "Permission denied" and do not run. Subclasses set format, toolbox and guard in reset.

    `format` is the family's format unless the agent loop chose one for every family
    (`agent.tool_format`, in task.metadata["tool_format"]): then reading `format` gives that one.
    `tool_prompt(specs)` writes the tool instructions in that format, or leaves them to the chat
    template (task.metadata["template_tools"]): they are then in `template_tools`, which the loop
    gives the template.

    Every subclass's `score` is wrapped by `rlyard.environment.outcomes.policy_line`, and every tool call
    by the same rule: what the policy wrote never raises out of a tool (it gets `error: ...`) or
    out of a grader (0 with the reason); only the platform's faults do (infra).
    """

    family_format: str = "hermes"  # what the family's task asks for (subclasses assign `format`)
    agent_format: str | None = None  # agent.tool_format's choice for this episode, when it overrides the family's
    template_tools: list[dict] | None = None  # tool specs the chat template renders this episode
    toolbox = None  # rlyard.agent.tools.ToolBox
    guard = None  # rlyard.agent.guard.Guard
    submitted: str | None = None
    calls = malformed = 0
    workspace = None  # a Path the episode owns; removed by close()
    task = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "score" in cls.__dict__:  # each family's grader, wherever it is defined, behind the one line
            cls.score = policy_line(cls.__dict__["score"])

    @property
    def format(self) -> str:
        return self.agent_format or self.family_format

    @format.setter
    def format(self, value: str) -> None:
        self.family_format = value

    def begin(self, task: Task, prefix: str) -> Path:
        """A new episode: the previous workspace removed, counters cleared, a fresh empty workspace."""
        self.close()
        self.task, self.submitted, self.malformed, self.calls = task, None, 0, 0
        self.agent_format, self.template_tools = task.metadata.get("tool_format"), None
        self.workspace = Path(tempfile.mkdtemp(prefix=prefix))
        return self.workspace

    def tool_prompt(self, specs: list[dict]) -> str:
        """The tool instructions for the system prompt; "" when the chat template writes them."""
        if self.agent_format is not None and self.task.metadata.get("template_tools"):
            self.template_tools = specs
            return ""
        return render_tool_specs(specs, self.format)

    def close(self) -> None:
        if self.workspace is not None:
            remove_workspace(self.workspace)  # with the tmpfs its sandbox mounted on it, if any
            self.workspace = None

    def step(self, reply: str) -> StepResult:
        try:
            parsed = parse_tool_calls(reply, self.format, self.toolbox.specs())
        except Exception as error:  # the parser answers in words; this is its net, by the one rule
            if (message := tool_error(error)) is None:
                raise
            self.malformed += 1
            return StepResult(messages=[{"role": "tool", "content": message}], done=False)
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
            try:
                refusal = self.guard.check(call.name, call.arguments) if self.guard else None
                content = refusal or self.toolbox.call(call.name, call.arguments).content
            except Exception as error:  # the policy's arguments: an error message; the platform's fault: raised
                if (content := tool_error(error)) is None:
                    raise
            outputs.append(f"[{call.name}]\n{content}")
        return StepResult(messages=[{"role": "tool", "content": "\n\n".join(outputs)}], done=False)


SUBMIT_COMMAND = re.compile(r"submit(\s|$)")
