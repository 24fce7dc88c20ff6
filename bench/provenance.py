"""What every result file records about where its figures come from: the code version."""
from __future__ import annotations

import subprocess


def commit() -> str:
    """The commit the figures come from (`+dirty` when tracked files had uncommitted changes).
    Result files are not code: figures run one after another write bench/results/, and the
    second would otherwise call the first's fresh result file a change to the code."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def shown_path(arg: str) -> str:
    """An absolute path as a result file may show it: relative to the checkout (the working
    folder), `<tmp>/<name>` in the temporary folder, `<outside>/<name>` anywhere else; any other
    text as it is."""
    import os
    import tempfile
    from pathlib import Path

    if not arg.startswith("/") or any(c.isspace() for c in arg):
        return arg
    path, root = Path(arg), Path.cwd()
    if path.is_relative_to(root):
        return os.path.relpath(path, root)
    return f"<tmp>/{path.name}" if path.is_relative_to(tempfile.gettempdir()) else f"<outside>/{path.name}"


def command_line(argv: list[str]) -> str:
    """The command as typed, each absolute path shown as `shown_path` shows it: a result file
    names no folder of the machine it ran on."""
    return " ".join(shown_path(arg) for arg in argv)


def scrub(value):
    """The value with every absolute path shown as `shown_path` shows it."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return shown_path(value) if isinstance(value, str) else value
