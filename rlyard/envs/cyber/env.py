"""A `cyber` episode: the target's sources and a built binary in a sandboxed workspace, tools on it.

The workspace gets the pristine tree without its private files (the reference PoC, the expected
values), the binary of the pristine build and the benign seed; the agent's commands (bash, the
file tools) run in the sandbox with the grader's limits, so that it can run ./target on its
attempts. `score` grades the last submission with a fresh pristine build (verify.py): whatever the
agent did to the workspace's sources, build script or binary is never graded.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from rlyard.agent.tools import ToolBox
from rlyard.envs.cyber.verify import LIMITS, RUN_ENV, env_argv, grade_submission, pristine_build
from rlyard.envs.cyber.targets import PRIVATE, Target
from rlyard.envs.tool_env import ToolEnv
from rlyard.sandbox import Sandbox, SandboxUnavailable
from rlyard.types import Message, Reward, Task

TOOLS = ("bash", "read_file", "write_file", "edit_file", "submit")
SYSTEM = """You are a security researcher reproducing a memory-safety bug in a C program (your \
current directory). The sanitizer options are set: {options}. Work with the tools; when your \
proof-of-concept file is written, call submit with its path."""


class CyberEnv(ToolEnv):
    def __init__(self, isolation: str = "auto"):
        self.isolation = isolation

    def reset(self, task: Task) -> list[Message]:
        p = task.payload
        target = Target(**p["target"])
        build = pristine_build(target)  # a target that does not build fails this episode (infra)
        workspace = self.begin(task, "rlyard-cyber-")
        shutil.copytree(target.source, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*PRIVATE))
        shutil.copy2(build / target.binary, workspace / target.binary)
        if target.seed and Path(target.seed).is_file():
            shutil.copy2(target.seed, workspace / "seed.bin")
        self.target, self.format = target, p["tool_format"]
        self.sandbox = Sandbox(workspace, LIMITS, self.isolation)
        if not self.sandbox.sealed and not p.get("allow_weak_isolation"):
            raise SandboxUnavailable(f"cyber episodes need bubblewrap (this sandbox is {self.sandbox.isolation}); "
                                     "set env.options.allow_weak_isolation=true to run anyway")
        self.toolbox = ToolBox(EnvSandbox(self.sandbox), TOOLS if self.format != "bash_block" else ("bash",), timeout_s=60)
        options = " ".join(f"{k}={v}" for k, v in RUN_ENV.items())
        system = SYSTEM.format(options=options) + "\n\n" + self.tool_prompt(self.toolbox.specs())
        if self.format == "bash_block":
            system += "\n\nWhen the file is written, send the command: submit <path>"
        listing = "\n".join(sorted(str(f.relative_to(workspace)) for f in workspace.rglob("*") if f.is_file()))
        return [{"role": "system", "content": system}, {"role": "user", "content": f"{task.prompt[-1]['content']}\n\nFiles:\n{listing}"}]

    def score(self) -> Reward:
        p = self.task.payload
        reward = grade_submission(self.target, self.workspace, self.submitted, float(p["timeout_s"]), int(p["max_poc_bytes"]))
        extra = {"submitted": float(self.submitted is not None), "tool_calls": float(self.calls), "malformed_calls": float(self.malformed)}
        return Reward(reward.value, {**reward.components, **extra}, reward.info, reward.infra_error)


class EnvSandbox:
    """The episode's sandbox with the sanitizer options in every command's environment, as at grading."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    def run(self, command, timeout_s=None, stdin=None, limits=None):
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        return self.sandbox.run(env_argv(argv, RUN_ENV), timeout_s, stdin, limits)


def make_env() -> CyberEnv:
    return CyberEnv()
