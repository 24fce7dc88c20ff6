"""A `code` episode: a repository at its base commit, an issue, tools in the sandbox, hidden tests.

The workspace is a git repository whose whole history is the base commit; the hidden tests are
not in it. A group's harness arm (its tool set) is drawn from a hash of (seed, round, task), so
every sample of a group uses the same tools and a resumed run draws the same arms.

An arm named after a harness (`mini_swe_agent`, see rlyard/harness) is played by that harness
instead of rlyard's agent loop: reset builds the same workspace, sandbox and guard, the harness
acts through `run_command` only, and `score` grades the final workspace as for any arm.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from rlyard.agent.guard import Guard
from rlyard.agent.tools import ToolBox, command_problem
from rlyard.envs.tool_env import ToolEnv
from rlyard.envs.code.repo import copy_workdir, export_commit, init_single_commit, write_files
from rlyard.envs.code.verify import grade
from rlyard.harness.base import ExecResult, is_harness
from rlyard.sandbox import Limits, Sandbox, SandboxUnavailable
from rlyard.types import Message, Reward, Task

HARNESS_TIMEOUT_S = 60.0  # a harness command's wall time at most, as the bash tool's
LIMITS = Limits(wall_s=120, cpu_s=120, memory_bytes=1 << 30, output_bytes=256 << 10, fsize_bytes=32 << 20)
SYSTEM = """You are a software engineer working in a git repository (your current directory).
Resolve the issue below by editing the code. The project's tests will be run after you finish, \
with extra hidden tests for the issue; do not edit the tests. Work with the tools; when the fix \
is complete, call submit with a one-line summary.

"""


def choose_arm(payload: dict, round_: str, task_id: str) -> str:
    """One arm per group: a stable hash of (seed, round, task) picks it by the arm weights."""
    weights = {name: float(w) for name, w in payload["arm_weights"].items() if float(w) > 0}
    digest = hashlib.sha256(f"{payload['seed']}|{round_}|{task_id}".encode()).digest()
    point = int.from_bytes(digest[:8], "big") / 2**64 * sum(weights.values())
    for name, weight in sorted(weights.items()):
        point -= weight
        if point < 0:
            return name
    return sorted(weights)[-1]


def build_workspace(source: dict, dest: Path) -> None:
    """The base repository in `dest`, its history ending at the base commit."""
    if "files" in source:
        write_files(dest, source["files"])
        init_single_commit(dest)
    elif "mirror" in source:
        export_commit(Path(source["mirror"]), source["base_commit"], dest)
        write_files(dest, source.get("generated", {}))  # what installing the repository writes (a version module)
        init_single_commit(dest)
    else:
        copy_workdir(Path(source["workdir"]), dest, source.get("base_commit"))


class CodeEnv(ToolEnv):
    def __init__(self, isolation: str = "auto"):
        self.isolation = isolation
        self.arm = ""

    def reset(self, task: Task) -> list[Message]:
        p = task.payload
        build_workspace(p["source"], self.begin(task, "rlyard-code-"))
        self.arm = choose_arm(p, str(task.metadata.get("round", "")), task.id)
        self.format = p["tool_format"]
        binds = {"ro_binds": tuple(p["ro_binds"])} if p.get("ro_binds") else {}
        self.sandbox = Sandbox(self.workspace, LIMITS, self.isolation, **binds)
        if not self.sandbox.sealed and not p.get("allow_weak_isolation"):
            raise SandboxUnavailable(f"code episodes need bubblewrap (this sandbox is {self.sandbox.isolation}, which "
                                     "would let the policy read hidden tests); set env.options.allow_weak_isolation=true to run anyway")
        tools = [t for t in p["arms"][self.arm] if t != "submit" or self.format != "bash_block"]  # bash_block submits by command
        self.toolbox = ToolBox(self.sandbox, tuple(tools), timeout_s=60)
        new_files = [path for path, text in p["graded_files"].items() if text is not None and path in p["hidden_paths"]
                     and not (self.workspace / path).exists()]
        self.guard = Guard(new_files) if p["guard"] else None
        system = SYSTEM + self.tool_prompt(self.toolbox.specs())
        if self.format == "bash_block":
            system += "\n\nWhen the fix is complete, send the command: submit <summary>"
        listing = "\n".join(sorted(str(f.relative_to(self.workspace)) for f in self.workspace.rglob("*")
                                   if f.is_file() and ".git" not in f.relative_to(self.workspace).parts))
        issue = f"<issue>\n{p['problem_statement']}\n</issue>\n\nFiles in the repository:\n{listing}"
        return [{"role": "system", "content": system}, {"role": "user", "content": issue}]

    def harness_for(self, task: Task) -> str | None:
        """The harness that plays this task's group (its drawn arm names one), or None for a tool arm."""
        arm = choose_arm(task.payload, str(task.metadata.get("round", "")), task.id)
        if not is_harness(arm):
            return None
        extra = sorted(set(task.payload["arms"][arm]) - {"bash", "submit"})
        if extra:
            raise ValueError(f"code option arms.{arm}: a harness arm acts through shell commands only; "
                             f"give it [bash], not {sorted(task.payload['arms'][arm])}")
        return arm

    def run_command(self, command: str, timeout_s: float | None = None) -> ExecResult:
        """A harness's exec function: the command in this episode's sandbox, behind the same guard
        as the bash tool (a refused command does not run), counted as a tool call."""
        self.calls += 1
        if problem := command_problem(command):  # a NUL byte would make the sandbox raise: infra for the policy's text
            return ExecResult(f"error: {problem}", 1)
        refusal = self.guard.check("bash", {"command": command}) if self.guard else None
        if refusal:
            return ExecResult(refusal, 1)
        result = self.sandbox.run(command, timeout_s=min(timeout_s or HARNESS_TIMEOUT_S, HARNESS_TIMEOUT_S))
        text = result.text + ("\n[output truncated]" if result.truncated else "")
        return ExecResult(text, result.exit_code, result.timed_out)

    def score(self) -> Reward:
        p = self.task.payload
        verdict = grade(self.sandbox, p["graded_files"], p["test_command"], p["timeout_s"], p["timeout_is_infra"],
                        p.get("expected_tests"), p.get("xfail_ok", ()), base_source=p["source"])
        extra = {"submitted": float(self.submitted is not None), "tool_calls": float(self.calls),
                 "malformed_calls": float(self.malformed), "guard_blocks": float(self.guard.blocks if self.guard else 0),
                 f"arm_{self.arm}": 1.0}
        return Reward(verdict.value, {**verdict.components, **extra}, {**verdict.info, "arm": self.arm}, verdict.infra_error)


def make_env() -> CodeEnv:
    return CodeEnv()
