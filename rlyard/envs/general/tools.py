"""Task tools: read-only, parameterised SQL over a database the agent can query but never read.

A task declares each tool as a query with named parameters (`:order_id`); the agent supplies
only the values, which SQLite binds, so no SQL of the agent's ever runs. The database is built
from the task's script into a private folder of the grader process (mode 0700, outside every
workspace, and /tmp is a fresh tmpfs inside the sandbox), and opened read-only.
"""
from __future__ import annotations

import shlex
import sqlite3
import tempfile
import threading
from pathlib import Path

from rlyard.agent.tools import ToolBox, ToolOutput

MAX_ROWS = 50
_built: dict[str, Path] = {}
_lock = threading.Lock()
_private = None


def database_for(task_dir: str, script: str) -> Path:
    """The task's SQLite file, built once per process from its SQL script."""
    global _private
    key = str(Path(task_dir) / script)
    with _lock:
        if key not in _built:
            if _private is None:
                _private = Path(tempfile.mkdtemp(prefix="rlyard-general-db-"))
            path = _private / f"{len(_built)}-{Path(task_dir).name}.sqlite"
            with sqlite3.connect(path) as connection:
                connection.executescript(Path(key).read_text())
            connection.close()
            _built[key] = path
        return _built[key]


def tool_spec(tool: dict) -> dict:
    properties = dict(tool.get("parameters") or {})
    return {"type": "function", "function": {"name": tool["name"], "description": tool["description"],
                                             "parameters": {"type": "object", "properties": properties,
                                                            "required": sorted(properties)}}}


def run_query(database: Path, tool: dict, arguments: dict, max_chars: int) -> ToolOutput:
    """The tool's rows as a small table; bad arguments come back as text, never raise."""
    wanted = sorted((tool.get("parameters") or {}))
    missing = [name for name in wanted if name not in arguments]
    extra = sorted(set(arguments) - set(wanted))
    if missing or extra:
        return ToolOutput(f"error: {tool['name']} takes {wanted}; missing {missing}, unknown {extra}", error=True)
    values = {name: arguments[name] for name in wanted}
    if any(not isinstance(v, (str, int, float)) or isinstance(v, bool) for v in values.values()):
        return ToolOutput("error: arguments must be strings or numbers", error=True)
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        cursor = connection.execute(tool["sql"], values)
        header = [column[0] for column in cursor.description or []]
        rows = cursor.fetchmany(MAX_ROWS + 1)
    except (sqlite3.Error, OverflowError, UnicodeError) as error:  # an integer past 64 bits, a lone surrogate: the policy's
        return ToolOutput(f"error: {type(error).__name__}: {error}", error=True)
    finally:
        connection.close()
    if not rows:
        return ToolOutput("no rows")
    lines = ["\t".join(header)] + ["\t".join("" if v is None else str(v) for v in row) for row in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"[more than {MAX_ROWS} rows; only the first {MAX_ROWS} shown]")
    text = "\n".join(lines)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n[output cut at {max_chars} characters]"
    return ToolOutput(text)


def command_help(tool: dict) -> str:
    """One task tool as a command line: `total_amount region=<region>: The total ...`."""
    arguments = "".join(f" {name}=<{name}>" for name in sorted(tool.get("parameters") or {}))
    return f"- {tool['name']}{arguments}: {tool['description']}"


def command_call(task_tools: dict[str, dict], command: str) -> tuple[dict, dict] | str | None:
    """A bash command that calls a task tool (bash_block's way: `get_order order_id=ORD-1042`):
    (tool, arguments), an error sentence, or None when it names no task tool (a shell command)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or words[0] not in task_tools:
        return None
    tool, arguments = task_tools[words[0]], {}
    for word in words[1:]:
        name, sep, value = word.partition("=")
        if not sep or not name:
            return f"error: {tool['name']} takes name=value arguments, got {word!r}; e.g. {command_help(tool)[2:]}"
        arguments[name] = value
    return tool, arguments


class TaskToolBox(ToolBox):
    """The sandbox tools plus the task's SQL tools, behind the one ToolBox interface.

    With `commands` (the bash_block format, which calls bash alone) the task tools are commands
    instead: a bash command whose first word names one runs its query (`name=value` arguments,
    bound by SQLite as ever) and never reaches the shell; bash's description lists them."""

    def __init__(self, sandbox, names: tuple[str, ...], task_tools: list[dict], database: Path | None,
                 max_chars: int = 4000, timeout_s: float = 20.0, commands: bool = False):
        super().__init__(sandbox, names, timeout_s)
        clash = [t["name"] for t in task_tools if t["name"] in names]
        if clash:
            raise ValueError(f"task tools {clash} clash with the built-in tools")
        self.task_tools = {t["name"]: t for t in task_tools}
        self.database, self.max_chars, self.commands = database, max_chars, commands and bool(task_tools)

    def specs(self) -> list[dict]:
        if self.commands:
            specs = super().specs()
            for spec in specs:
                if spec["function"]["name"] == "bash":
                    listed = "\n".join(command_help(t) for t in self.task_tools.values())
                    spec["function"] = {**spec["function"], "description": spec["function"]["description"]
                                        + "\nTask commands (run one as its own command, arguments as name=value):\n" + listed}
            return specs
        return super().specs() + [tool_spec(t) for t in self.task_tools.values()]

    def call(self, name: str, arguments: dict) -> ToolOutput:
        if name in self.task_tools and not self.commands:
            return run_query(self.database, self.task_tools[name], arguments, self.max_chars)
        if self.commands and name == "bash" and isinstance(arguments, dict) and isinstance(arguments.get("command"), str):
            found = command_call(self.task_tools, arguments["command"])
            if isinstance(found, str):
                return ToolOutput(found, error=True)
            if found is not None:
                return run_query(self.database, found[0], found[1], self.max_chars)
        output = super().call(name, arguments)
        if len(output.content) > self.max_chars:
            output.content = output.content[:self.max_chars] + f"\n[output cut at {self.max_chars} characters]"
        return output
