"""The agent's tools: bash, read / write / edit a file, grep, glob, submit.

Every tool runs inside the episode's sandbox, in its workspace: file tools are small Python
programs fed their arguments as JSON on stdin, so no path is ever opened by the host process
on the model's behalf. A tool never raises on the model's input: errors come back as text
(a command no process can be given - a NUL byte, text that is no UTF-8, over the kernel's
length of one argument - is refused here, before the sandbox would report it as its own failure).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from rlyard.sandbox import Sandbox

# Linux refuses one argument over 128 KiB (MAX_ARG_STRLEN) with E2BIG, which the sandbox would
# report as a sandbox that cannot start (infra): longer commands are the policy's to split.
MAX_COMMAND_BYTES = 100_000

SPECS: dict[str, dict] = {
    "bash": {"description": "Run a shell command in the workspace and return its output.",
             "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    "read_file": {"description": "Read a text file (optionally lines start..end, 1-based).",
                  "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "start": {"type": "integer"},
                                                                  "end": {"type": "integer"}}, "required": ["path"]}},
    "write_file": {"description": "Create or overwrite a file with the given content.",
                   "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                                  "required": ["path", "content"]}},
    "edit_file": {"description": "Replace one exact, unique occurrence of old_text with new_text in a file.",
                  "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old_text": {"type": "string"},
                                                                  "new_text": {"type": "string"}}, "required": ["path", "old_text", "new_text"]}},
    "grep": {"description": "Search files for a regular expression; prints file:line:text.",
             "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
                            "required": ["pattern"]}},
    "glob": {"description": "List files matching a glob pattern such as **/*.py.",
             "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}},
    "submit": {"description": "Finish the task and submit the final answer.",
               "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}},
}

# Run by `python3 -I` inside the sandbox (workspace modules such as a json.py are never imported);
# arguments arrive as JSON on stdin.
_FILE_TOOL = r'''
import json, pathlib, re, sys
sys.excepthook = lambda kind, exc, tb: (print(f"error: {kind.__name__}: {exc}"), sys.exit(1))
a = json.load(sys.stdin); tool = a.pop("tool")
def fail(msg): print(msg); sys.exit(1)
home = pathlib.Path.cwd().resolve()
def inside(p):
    """Paths (after links) must stay in the workspace: the sandbox's own /tmp is no place to write a fix."""
    p = pathlib.Path(p)
    full = (home / p).resolve()
    if p.is_absolute() and not str(p).startswith(str(home)) or (full != home and home not in full.parents):
        fail(f"error: {p} is outside the workspace; use a path relative to {home}")
    return p
for key in ("path",):
    if key in a and a[key] not in (None, ""): inside(a[key])
if tool == "glob" and (pathlib.PurePath(a["pattern"]).is_absolute() or ".." in pathlib.PurePath(a["pattern"]).parts):
    fail("error: the pattern must stay inside the workspace (no absolute paths, no ..)")
if tool == "read_file":
    p = pathlib.Path(a["path"])
    if not p.is_file(): fail(f"error: {p} is not a file")
    lines = p.read_text(errors="replace").splitlines()
    s, e = a.get("start") or 1, a.get("end") or len(lines)
    print("\n".join(f"{i}\t{l}" for i, l in enumerate(lines[s - 1:e], s)))
elif tool == "write_file":
    p = pathlib.Path(a["path"]); p.parent.mkdir(parents=True, exist_ok=True); p.write_text(a["content"])
    print(f"wrote {len(a['content'])} characters to {p}")
elif tool == "edit_file":
    p = pathlib.Path(a["path"])
    if not p.is_file(): fail(f"error: {p} is not a file")
    text = p.read_text(); n = text.count(a["old_text"])
    if n != 1: fail(f"error: old_text occurs {n} times in {p}; it must occur exactly once")
    p.write_text(text.replace(a["old_text"], a["new_text"])); print(f"edited {p}")
elif tool == "grep":
    try: rx = re.compile(a["pattern"])
    except re.error as e: fail(f"error: bad pattern: {e}")
    root = pathlib.Path(a.get("path") or "."); hits = 0
    for f in sorted([root] if root.is_file() else root.rglob("*")):
        if not f.is_file(): continue
        for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if rx.search(line):
                print(f"{f}:{i}:{line}"); hits += 1
    if not hits: print("no matches")
elif tool == "glob":
    found = sorted(str(p) for p in pathlib.Path(".").glob(a["pattern"]))
    print("\n".join(found) if found else "no matches")
'''


def command_problem(command: object) -> str | None:
    """Why `command` cannot be run as a shell command (said to the policy), or None."""
    if not isinstance(command, str):
        return f"the command must be a string, got {type(command).__name__}"
    if "\x00" in command:
        return "the command contains a NUL byte, which no command line can hold"
    try:
        size = len(command.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return "the command is not valid UTF-8 text (it holds a lone surrogate)"
    if size > MAX_COMMAND_BYTES:
        return (f"the command is {size} bytes, over the limit of {MAX_COMMAND_BYTES}; write a script with "
                "write_file (or in several commands) and run it")
    return None


@dataclass
class ToolOutput:
    content: str  # what the model sees
    submitted: str | None = None  # the answer, when the tool was `submit`
    error: bool = False


class ToolBox:
    def __init__(self, sandbox: Sandbox, names: tuple[str, ...] = tuple(SPECS), timeout_s: float = 20.0):
        unknown = [n for n in names if n not in SPECS]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; available: {sorted(SPECS)}")
        self.sandbox, self.names, self.timeout_s = sandbox, names, timeout_s

    def specs(self) -> list[dict]:
        """OpenAI-style function specs of the enabled tools."""
        return [{"type": "function", "function": {"name": name, **SPECS[name]}} for name in self.names]

    def call(self, name: str, arguments: dict) -> ToolOutput:
        if name not in self.names:
            return ToolOutput(f"error: no tool named {name!r}; available: {', '.join(self.names)}", error=True)
        if name == "submit":
            return ToolOutput("submitted", submitted=str(arguments.get("answer", "")))
        if not isinstance(arguments, dict):
            return ToolOutput(f"error: the arguments of {name} must be an object, got {type(arguments).__name__}", error=True)
        if name == "bash":
            command = arguments.get("command", "")
            if problem := command_problem(command):
                return ToolOutput(f"error: {problem}", error=True)
            result = self.sandbox.run(command, timeout_s=self.timeout_s)
        else:
            try:
                stdin = json.dumps({"tool": name, **arguments})
            except (RecursionError, TypeError, ValueError) as error:
                return ToolOutput(f"error: the arguments of {name} cannot be read ({type(error).__name__})", error=True)
            result = self.sandbox.run(["python3", "-I", "-c", _FILE_TOOL], timeout_s=self.timeout_s, stdin=stdin)
        text = result.text
        if result.timed_out:
            text += f"\n[timed out after {self.timeout_s:.0f} s]"
        elif result.truncated:
            text += "\n[output truncated]"
        if name == "bash":
            text += f"\n[exit code {result.exit_code}]"
        return ToolOutput(text.strip() or "(no output)", error=result.exit_code != 0)
