"""Task tools: read-only, parameterised SQL over a database the agent can query but never read.

A task declares each tool as a query with named parameters (`:order_id`); the agent supplies
only the values, which SQLite binds, so no SQL of the agent's ever runs. The database is built
from the task's script into a private folder of the grader process (mode 0700, outside every
workspace, and /tmp is a fresh tmpfs inside the sandbox), and opened read-only.
"""
from __future__ import annotations

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


class TaskToolBox(ToolBox):
    """The sandbox tools plus the task's SQL tools, behind the one ToolBox interface."""

    def __init__(self, sandbox, names: tuple[str, ...], task_tools: list[dict], database: Path | None,
                 max_chars: int = 4000, timeout_s: float = 20.0):
        super().__init__(sandbox, names, timeout_s)
        clash = [t["name"] for t in task_tools if t["name"] in names]
        if clash:
            raise ValueError(f"task tools {clash} clash with the built-in tools")
        self.task_tools = {t["name"]: t for t in task_tools}
        self.database, self.max_chars = database, max_chars

    def specs(self) -> list[dict]:
        return super().specs() + [tool_spec(t) for t in self.task_tools.values()]

    def call(self, name: str, arguments: dict) -> ToolOutput:
        if name in self.task_tools:
            return run_query(self.database, self.task_tools[name], arguments, self.max_chars)
        output = super().call(name, arguments)
        if len(output.content) > self.max_chars:
            output.content = output.content[:self.max_chars] + f"\n[output cut at {self.max_chars} characters]"
        return output
