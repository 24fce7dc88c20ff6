"""A `webdev` episode: an empty dist/ in a sandboxed workspace, file tools and bash on it.

The agent writes the site with write_file / edit_file (or bash: `node` is there to try its
scripts) and calls submit; a reply without a tool call ends the episode too. `score` renders
whatever dist/ holds then (verify.py): the browser runs on the host, but it only ever reads
files that resolve inside dist/, and the reference pages live in rlyard's package folder,
which the sandbox masks.
"""
from __future__ import annotations

from rlyard.agent.tools import ToolBox
from rlyard.envs.tool_env import ToolEnv
from rlyard.envs.webdev.verify import grade_dist
from rlyard.sandbox import Limits, Sandbox, SandboxUnavailable
from rlyard.types import Message, Reward, Task

TOOLS = ("bash", "read_file", "write_file", "edit_file", "submit")
LIMITS = Limits(wall_s=30, cpu_s=30, memory_bytes=2 << 30, output_bytes=64 << 10)
SYSTEM = """You are a front-end web developer working in a folder (your current directory). Build \
the site the user asks for in dist/: dist/index.html is its entry page; put CSS, JavaScript and \
images next to it and link them with relative paths. The site is shown in a browser 1440 px and \
390 px wide with no network: a request for anything outside dist/, a script error or a script \
that never finishes makes the page worthless. When the site is done, call submit."""


class WebdevEnv(ToolEnv):
    def __init__(self, isolation: str = "auto"):
        self.isolation = isolation

    def reset(self, task: Task) -> list[Message]:
        workspace = self.begin(task, "rlyard-webdev-")
        (workspace / "dist").mkdir()
        self.format = task.payload["tool_format"]
        self.sandbox = Sandbox(workspace, LIMITS, self.isolation)
        if not self.sandbox.sealed and not task.payload["allow_weak_isolation"]:
            raise SandboxUnavailable(f"webdev episodes need bubblewrap (this sandbox is {self.sandbox.isolation}); "
                                     "set env.options.allow_weak_isolation=true to run anyway")
        self.toolbox = ToolBox(self.sandbox, TOOLS if self.format != "bash_block" else ("bash",), timeout_s=30)
        system = SYSTEM + "\n\n" + self.tool_prompt(self.toolbox.specs())
        if self.format == "bash_block":
            system += "\n\nWhen the site is done, send the command: submit done"
        return [{"role": "system", "content": system}, *task.prompt]

    def score(self) -> Reward:
        payload, run_dir = self.task.payload, self.task.metadata.get("run_dir")  # the run folder, as the run gives it
        if run_dir and not payload.get("screenshot_dir"):
            payload = {**payload, "screenshot_dir": f"{run_dir}/screenshots"}
        reward = grade_dist(self.workspace / "dist", payload, self.task.id)
        extra = {"submitted": float(self.submitted is not None), "tool_calls": float(self.calls),
                 "malformed_calls": float(self.malformed)}
        return Reward(reward.value, {**reward.components, **extra}, reward.info, reward.infra_error)


def make_env() -> WebdevEnv:
    return WebdevEnv()
