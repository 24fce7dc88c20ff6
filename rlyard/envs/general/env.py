"""A `general` episode: the task's files in a sandboxed workspace, file tools, the task's SQL tools.

The agent writes `answer.md` (and any file the task asks for); a final reply without a tool
call, or `submit(answer)`, becomes answer.md when the agent wrote none. `score` then reads the
rubric from the task folder, which no sandbox can see (rlyard's package is masked, a user's task
folder is hidden, and the database lives in the grader's private folder), and grades the final
workspace. A rubric that cannot be read, or a judge that cannot answer, fails the episode as
infra: the member leaves its group instead of scoring 0.
"""
from __future__ import annotations

import os
import shutil
import traceback
from dataclasses import replace
from pathlib import Path

from rlyard.envs.general.judging import judge_for, make_judge_fn
from rlyard.envs.general.rubric import LengthPenalty, RubricError, grade_rubric, length_penalties, load_rubric, read_inside
from rlyard.envs.general.tools import TaskToolBox, database_for
from rlyard.envs.judge import JudgeUnavailable
from rlyard.envs.tool_env import ToolEnv
from rlyard.sandbox import Limits, Sandbox, SandboxUnavailable
from rlyard.types import Message, Reward, Task, Trajectory

TOOLS = ("bash", "read_file", "write_file", "edit_file", "grep", "glob", "submit")
LIMITS = Limits(wall_s=20, cpu_s=20, memory_bytes=1 << 30, output_bytes=64 << 10)
ANSWER = "answer.md"
PROSE_KINDS = ("summarise",)  # kinds whose rule items pay only for an answer at all (rubric.py; a rubric's `prose` wins)
SYSTEM = """You are a careful analyst working in a folder of files (your current directory). Use the \
tools to read the files and query the task's tools. Write your final answer to {answer}{how} \
(or reply with the answer without a tool call), then stop."""


class GeneralEnv(ToolEnv):
    def __init__(self, isolation: str = "auto"):
        self.isolation = isolation
        self.final_reply = ""

    def reset(self, task: Task) -> list[Message]:
        p = task.payload
        folder = Path(p["dir"])
        workspace = self.begin(task, "rlyard-general-")
        self.final_reply = ""
        if (folder / "workspace").is_dir():
            shutil.copytree(folder / "workspace", workspace, dirs_exist_ok=True)
        database = database_for(str(folder), p["database"]) if p["tools"] else None
        hide = tuple(str(x) for x in (folder.parent, database.parent if database else None) if x is not None)
        self.sandbox = Sandbox(workspace, LIMITS, self.isolation, hide=hide)
        if not self.sandbox.sealed and not p.get("allow_weak_isolation"):
            raise SandboxUnavailable(f"general episodes need bubblewrap (this sandbox is {self.sandbox.isolation}); "
                                     "set env.options.allow_weak_isolation=true to run anyway")
        self.format = p["tool_format"]
        names = TOOLS if self.format != "bash_block" else ("bash",)
        self.toolbox = TaskToolBox(self.sandbox, names, p["tools"], database, int(p["tool_output_chars"]), timeout_s=30,
                                   commands=self.format == "bash_block")
        how = " with write_file" if "write_file" in names else ""  # bash_block has bash alone
        system = SYSTEM.format(answer=ANSWER, how=how) + "\n\n" + self.tool_prompt(self.toolbox.specs())
        listing = "\n".join(sorted(str(f.relative_to(workspace)) for f in workspace.rglob("*") if f.is_file())) or "(none)"
        tools = ", ".join(t["name"] for t in p["tools"])
        user = f"{task.prompt[-1]['content']}\n\nFiles:\n{listing}" + (f"\n\nTask tools: {tools}" if tools else "")
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self, reply: str):
        result = super().step(reply)
        if result.done and result.reason == "no_tool_call":
            self.final_reply = reply
        return result

    def answer_text(self) -> str:
        """answer.md as the agent left it; else its submitted answer or final reply, written there.
        An answer.md that is a link (or not a regular file) is graded as empty, never followed."""
        path = self.workspace / ANSWER
        if os.path.lexists(path):
            return read_inside(self.workspace, ANSWER) or ""
        text = (self.submitted if self.submitted is not None else self.final_reply).strip()
        path.write_text(text + "\n" if text else "", encoding="utf-8", errors="replace")  # a lone surrogate is the policy's
        return text

    def score(self) -> Reward:
        p = self.task.payload
        extra = {"tool_calls": float(self.calls), "malformed_calls": float(self.malformed)}
        answer = self.answer_text()
        verdict = grade(self.task, self.workspace, answer, bool(p["rules_only"]))
        return Reward(verdict.value, {**verdict.components, **extra}, verdict.info, verdict.infra_error)


def rubric_of(task: Task):
    """The task's rubric, read from its folder at grading time (never part of the payload)."""
    return load_rubric(Path(task.payload["dir"]) / "verifier" / "rubric.yaml")


def grade(task: Task, workspace: Path, answer: str, rules_only: bool) -> Reward:
    """The task's rubric on a finished workspace. No answer at all (an empty answer.md and none of
    the files the rubric reads) is 0 whatever the rubric's not_contains items would pay."""
    p = task.payload
    try:
        rubric = rubric_of(task)
    except RubricError as error:
        return Reward(0.0, {}, {"error": str(error)}, infra_error=True)
    files = {str(i.spec.get("source", i.spec.get("path", ""))) for i in rubric.items if i.method in ("file", "json_schema")}
    if not answer.strip() and not any(read_inside(workspace, f) for f in files - {"", "answer"}):
        return Reward(0.0, {"empty_answer": 1.0}, {"answer": ""})
    judge = None
    if rubric.has_judge and not rules_only:
        judge = make_judge_fn(judge_for(p["judge"]), task.prompt[-1]["content"])
    try:
        verdict = grade_rubric(rubric, workspace, answer, judge, rules_only=rules_only, prose=task.metadata.get("kind") in PROSE_KINDS)
    except JudgeUnavailable as error:
        return Reward(0.0, {}, {"error": f"judge: {error}"}, infra_error=True)
    except Exception:
        return Reward(0.0, {}, {"error": traceback.format_exc(limit=3)}, infra_error=True)
    components = {**verdict.components, "answer_words": float(len(answer.split()))}
    return Reward(verdict.value, components, {**verdict.info, "answer": answer[:4000]})


def score_group(task: Task, trajectories: list[Trajectory]) -> list[Trajectory]:
    """The length penalty, anchored on the group: each scored member loses
    max_penalty * min(1, max(0, L / A - 1 - dead_zone)) ** exponent, A = the group's quantile length."""
    p = task.payload
    penalty = None
    try:
        penalty = rubric_of(task).length_penalty
    except RubricError:
        pass  # its members are infra already (score() could not read it either)
    if penalty is None and p.get("length_penalty"):
        penalty = LengthPenalty(**p["length_penalty"])
    if penalty is None:
        return trajectories
    scored = [i for i, t in enumerate(trajectories) if not t.infra_error]
    penalties = length_penalties([float(trajectories[i].num_sampled_tokens) for i in scored], penalty)
    out = list(trajectories)
    for i, amount in zip(scored, penalties):
        t = trajectories[i]
        out[i] = replace(t, reward=max(0.0, t.reward - amount), components={**t.components, "length_penalty": amount})
    return out


def make_env() -> GeneralEnv:
    return GeneralEnv()
