"""A multi-turn episode: the task's file tree in a fresh sandboxed workspace, and tools on it.

Tool calls use the Hermes <tool_call> format (all tools), or with the task option
`tool_format: bash_block` one fenced bash block per reply (the minimal-agent convention; the
command `submit <answer>` submits); `agent.tool_format` may choose another (llama3_json: all
tools) and leave the tool instructions to the chat template. A reply without a tool call ends
the episode (reason "no_tool_call"); submitting ends it with an answer; malformed calls are
answered with a readable error and counted.
"""
from __future__ import annotations

from rlyard.agent.tools import ToolBox
from rlyard.envs.tool_env import ToolEnv
from rlyard.envs.files.verify import verify
from rlyard.sandbox import Limits, Sandbox
from rlyard.types import Message, Reward, Task

TOOLS = ("bash", "grep", "read_file", "glob", "submit")
LIMITS = Limits(wall_s=10, cpu_s=10, memory_bytes=512 << 20, output_bytes=64 << 10)


class FilesEnv(ToolEnv):
    def __init__(self, isolation: str = "auto"):
        self.isolation = isolation

    def reset(self, task: Task) -> list[Message]:
        self.begin(task, "rlyard-files-")
        for relative, content in task.payload["files"].items():
            path = self.workspace / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        self.format = task.payload.get("tool_format", "hermes")
        tools = TOOLS if self.format != "bash_block" else ("bash",)
        self.toolbox = ToolBox(Sandbox(self.workspace, LIMITS, self.isolation), tools)
        instructions = self.tool_prompt(self.toolbox.specs())
        system = "You are an agent working in a folder of files." + (f"\n\n{instructions}" if instructions else "")
        if self.format == "bash_block":
            system += "\n\nWhen you know the answer, send the command: submit <answer>"
        return [{"role": "system", "content": system}, *task.prompt]

    def score(self) -> Reward:
        base = verify(self.submitted or "", self.task)
        return Reward(base.value, {**base.components, "submitted": float(self.submitted is not None),
                                   "malformed_calls": float(self.malformed), "tool_calls": float(self.calls)}, base.info)


def make_env() -> FilesEnv:
    return FilesEnv()
