"""The code oracle: the task's reference fix played through the tools of the arm the env draws.

CodeEnv draws one harness arm per group from a hash of (seed, round, task) (`choose_arm`); the
oracle calls the same function on the same task, so its replies use exactly the tools the env
will offer: on the edit arm `edit_file` per changed block (or `write_file` of the fixed file),
on the bash arm a `git apply` heredoc of the patch, a `python3` in-place replacement or a `cat`
heredoc of the file. A seeded RNG varies the words, whether it looks at the code first (a
search for the enclosing function, a read of the region), whether it checks its change
(`git diff`, `py_compile`, a re-read), and how the edits are grouped into replies. Nothing it
runs prints anything that changes between runs (no test timings), so an episode replays to the
same tool messages. The edit arm and the file-writing variants need the base files, which
built-in tasks carry; for other sources only the bash arm's `git apply` is played. Generated
tasks in the bash_block format get `gen_oracle.py`'s shorter plan (read, replace, submit).
"""
from __future__ import annotations

import difflib
import json
import random
import re

from rlyard.agent.replies import bash_reply, hermes_reply, heredoc_delimiter, say, shell_quote
from rlyard.envs.code.env import choose_arm
from rlyard.envs.code.gen_oracle import oracle as generated_oracle
from rlyard.envs.code.repo import apply_patch, touched_paths
from rlyard.types import Task

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)
DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)")
SMALL_FILE = 1500  # characters: whole-file writes only below this
REPLY_CHARS = 600  # a fix reply's calls are packed under this (~200 tokens; configs/code.yaml: 256 tokens per turn)
MAX_TURNS = 8  # configs/code.yaml's agent.max_turns: a demonstration never needs more


class OracleError(ValueError):
    """The oracle cannot play this task on the arm the env drew (e.g. the edit arm without base files)."""


def edit_blocks(before: str, after: str) -> list[tuple[str, str]] | None:
    """(old_text, new_text) pairs that turn `before` into `after` by `edit_file`, applied in order,
    each old_text occurring exactly once when it is applied; None when no context makes that so."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    for context in (1, 2, 4, 8):
        blocks, text = [], before
        for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
            old, new = "".join(a[group[0][1]:group[-1][2]]), "".join(b[group[0][3]:group[-1][4]])
            if not old or text.count(old) != 1:
                break
            text = text.replace(old, new)
            blocks.append((old, new))
        else:
            if text == after:
                return blocks
    return None


def enclosing_name(text: str, line: int) -> str | None:
    """The function or class that holds (1-based) `line`, searching upwards; None at module level."""
    lines = text.splitlines()
    for i in range(min(line, len(lines)) - 1, -1, -1):
        match = DEF.match(lines[i])
        if match:
            return match.group(1)
    return None


class Plan:
    """Writes replies for one episode in the task's format with the arm's tools."""

    def __init__(self, rng: random.Random, fmt: str, tools: set[str]):
        self.rng, self.fmt, self.tools = rng, fmt, tools

    def calls(self, thought: str, calls: list[tuple[str, dict]]) -> str:
        return hermes_reply(thought, calls)

    def bash(self, thought: str, command: str) -> str:
        if self.fmt == "bash_block":
            return bash_reply(thought, command)
        return hermes_reply(thought, [("bash", {"command": command})])

    def submit(self, thought: str, summary: str) -> str:
        """The submit tool when the arm has it, else the `submit <summary>` command (ToolEnv reads both)."""
        if self.fmt == "hermes" and "submit" in self.tools:
            return hermes_reply(thought, [("submit", {"answer": summary})])
        return self.bash(thought, f"submit {summary}")


LOOK = ["Let me look at the code the issue is about, in {path}.", "First I'll read {path} around line {line}.",
        "I'll start by reading the relevant part of {path}.", ""]
SEARCH = ["The issue concerns {name}; let me find where it is defined.", "I'll search for the definition of {name}.", ""]
FIX = ["I see the problem. Fixing it now.", "Here is the bug. I'll change the code so the behaviour matches the issue.",
       "Now the fix in {path}.", "I'll edit {path}.", ""]
CHECK = ["Let me check the change.", "Checking that the edit is what I meant.", ""]
DONE = ["The fix is in place.", "Done: the code now does what the issue asks.", ""]
SUMMARY = ["Fixed the bug described in the issue in {path}.", "Corrected the behaviour in {path}.",
           "Fix in {path} so the reported case works."]


def oracle(task: Task, rng: random.Random) -> list[str]:
    """The replies that apply the reference fix on the arm CodeEnv will draw for `task`."""
    p = task.payload
    arm = choose_arm(p, str(task.metadata.get("round", "")), task.id)
    tools, fmt = set(p["arms"][arm]), p["tool_format"]
    if "generated" in p and fmt == "bash_block" and "bash" in tools:  # the learnable plan (gen_oracle.py)
        return generated_oracle(task, rng)
    if not {"bash", "write_file", "edit_file"} & tools or "submit" not in tools and "bash" not in tools:
        raise OracleError(f"arm {arm!r} ({sorted(tools)}) can neither change files nor submit")
    paths = touched_paths(p["patch"])
    base = p["source"].get("files")
    fixed = apply_patch({q: base.get(q) for q in paths}, p["patch"]) if base is not None else None
    if fixed is None and not {"bash"} <= tools:
        raise OracleError(f"the oracle plays arm {arm!r} only on tasks that carry their base files (built-in ones)")
    plan = Plan(rng, fmt, tools)
    first = paths[0]
    hunk = HUNK.search(p["patch"])
    line = int(hunk.group(1)) if hunk else 1
    facts = {"path": first, "line": line}
    replies = look(plan, rng, base, first, line, facts) if base is not None and rng.random() < 0.8 else []
    checked = check(plan, rng, fixed, first, line, p["patch"]) if rng.random() < 0.5 else []
    replies += fix(plan, rng, p["patch"], base, fixed, facts, MAX_TURNS - len(replies) - len(checked) - 1) + checked
    summary = say(rng, SUMMARY, **facts)
    replies.append(plan.submit(say(rng, DONE), summary))
    return replies


def look(plan: Plan, rng: random.Random, base: dict, path: str, line: int, facts: dict) -> list[str]:
    """Optionally find the enclosing function, then read the region of the first change."""
    out, text = [], base.get(path) or ""
    name = enclosing_name(text, line)
    top = path.split("/")[0] if "/" in path else "."
    if name and rng.random() < 0.5:
        pattern = f"def {name}" if f"def {name}" in text else f"class {name}"
        thought = say(rng, SEARCH, name=name)
        if "grep" in plan.tools and plan.fmt == "hermes":
            out.append(plan.calls(thought, [("grep", {"pattern": pattern, "path": top})]))
        elif "bash" in plan.tools:
            out.append(plan.bash(thought, f"grep -rn {shell_quote(pattern)} {top}"))
    start, end = max(1, line - rng.randint(3, 10)), line + rng.randint(12, 25)
    thought = say(rng, LOOK, **facts)
    if "read_file" in plan.tools and plan.fmt == "hermes":
        args = {"path": path} if len(text) < SMALL_FILE and rng.random() < 0.5 else {"path": path, "start": start, "end": end}
        out.append(plan.calls(thought, [("read_file", args)]))
    elif "bash" in plan.tools:
        command = rng.choice([f"sed -n '{start},{end}p' {path}", f"cat -n {path} | sed -n '{start},{end}p'"])
        out.append(plan.bash(thought, command))
    return out


def fix(plan: Plan, rng: random.Random, patch: str, base: dict | None, fixed: dict | None, facts: dict,
        turns: int) -> list[str]:
    """The reference fix through the arm's tools in at most `turns` replies, each kept under a
    size budget where it can (`pack`)."""
    budget = rng.choice([REPLY_CHARS // 2, REPLY_CHARS])
    if fixed is not None and {"edit_file", "write_file"} & plan.tools and plan.fmt == "hermes":
        calls = []
        for path, after in fixed.items():
            blocks = edit_blocks(base.get(path) or "", after) if "edit_file" in plan.tools and after is not None else None
            if blocks and ("write_file" not in plan.tools or len(after) >= SMALL_FILE or rng.random() < 0.7):
                calls += [("edit_file", {"path": path, "old_text": old, "new_text": new}) for old, new in blocks]
            elif "write_file" in plan.tools and after is not None:
                calls.append(("write_file", {"path": path, "content": after}))
            else:
                raise OracleError(f"the arm's tools cannot produce {path} as the reference fix has it")
        groups = pack([(call, len(json.dumps(call[1]))) for call in calls], budget, turns)
        return [plan.calls(say(rng, FIX, path=group[0][1]["path"]), group) for group in groups]
    if "bash" not in plan.tools:
        raise OracleError("the arm has no tool that edits files")
    whole = fixed is not None and all(after is not None for after in fixed.values())
    variant = rng.choice(["apply", "python", "cat"]) if whole else "apply"
    if variant == "cat" and any(len(after) >= SMALL_FILE for after in fixed.values()):
        variant = "python"
    blocks = {path: edit_blocks(base.get(path) or "", after) for path, after in fixed.items()} if whole else {}
    if variant == "python" and any(b is None for b in blocks.values()):
        variant = "apply"
    if variant == "python":
        items = [((path, block), len(repr(block))) for path, found in blocks.items() for block in found]
        groups = [[python_edit(path, [b for q, b in group if q == path]) for path in dict.fromkeys(q for q, _ in group)]
                  for group in pack(items, budget, turns)]
    elif variant == "cat":
        groups = pack([(heredoc(f"cat > {path} <<", after), len(after)) for path, after in fixed.items()], budget, turns)
    else:
        groups = pack([(heredoc("git apply --whitespace=nowarn <<", h), len(h)) for h in hunk_patches(patch)], budget, turns)
    return [plan.bash(say(rng, FIX, **facts), "\n".join(commands)) for commands in groups]


def pack(items: list[tuple[object, int]], budget: int, most: int) -> list[list]:
    """Consecutive items (with their sizes) into groups of at most `budget` where possible, and
    never more than `most` groups: the smallest neighbouring pair is merged until it fits."""
    groups: list[list] = []
    sizes: list[int] = []
    for item, size in items:
        if groups and sizes[-1] + size <= budget:
            groups[-1].append(item)
            sizes[-1] += size
        else:
            groups.append([item])
            sizes.append(size)
    while len(groups) > max(1, most):
        k = min(range(len(groups) - 1), key=lambda i: sizes[i] + sizes[i + 1])
        groups[k:k + 2] = [groups[k] + groups[k + 1]]
        sizes[k:k + 2] = [sizes[k] + sizes[k + 1]]
    return groups


def hunk_patches(patch: str) -> list[str]:
    """The patch cut into one small patch per hunk (its file's header + the hunk), applied in
    order: `git apply` finds each hunk's context even where an earlier one moved its lines."""
    out: list[str] = []
    for section in re.split(r"(?m)^(?=diff --git )", patch):
        if not section.strip():
            continue
        head, *hunks = re.split(r"(?m)^(?=@@ )", section)
        out += [head + hunk for hunk in hunks] or [section]
    return out


def heredoc(prefix: str, text: str) -> str:
    delimiter = heredoc_delimiter(text)
    return f"{prefix}'{delimiter}'\n{text}{'' if text.endswith(chr(10)) else chr(10)}{delimiter}"


def python_edit(path: str, blocks: list[tuple[str, str]]) -> str:
    """A python3 heredoc that replaces each block once, refusing when it is not there exactly once."""
    lines = ["from pathlib import Path", f"path = Path({path!r})", "text = path.read_text()"]
    for old, new in blocks:
        lines += [f"old, new = {old!r}, {new!r}", "assert text.count(old) == 1, old", "text = text.replace(old, new)"]
    lines.append("path.write_text(text)")
    return heredoc("python3 - <<", "\n".join(lines) + "\n")


def check(plan: Plan, rng: random.Random, fixed: dict | None, path: str, line: int, patch: str) -> list[str]:
    """Look at the change once: a re-read of the region, `git diff` (--stat for a big fix, whose
    diff the agent loop would cut), or a compile check."""
    thought = say(rng, CHECK)
    if "bash" in plan.tools:
        command = rng.choice((["git diff"] if len(patch) < 2000 else []) + ["git diff --stat"]
                             + ([f"python3 -m py_compile {path} && echo compiles"] if path.endswith(".py") else []))
        return [plan.bash(thought, command)]
    if "read_file" in plan.tools and plan.fmt == "hermes" and fixed is not None:
        return [plan.calls(thought, [("read_file", {"path": path, "start": max(1, line - 3), "end": line + 12})])]
    return []
