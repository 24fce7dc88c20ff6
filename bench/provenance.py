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


def command_line(argv: list[str]) -> str:
    """The command as typed, with each absolute path made relative to the checkout (or, outside
    it, `<outside>/<name>`): a result file names no folder of the machine it ran on."""
    import os
    from pathlib import Path

    root = Path.cwd()
    shown = []
    for arg in argv:
        path = Path(arg)
        if path.is_absolute():
            arg = os.path.relpath(path, root) if path.is_relative_to(root) else f"<outside>/{path.name}"
        shown.append(arg)
    return " ".join(shown)


def scrub(value):
    """The value with temporary machine paths (`/tmp/...`) reduced to `<tmp>/<name>`: a result
    file names no folder of the machine it ran on."""
    import tempfile
    from pathlib import Path

    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, str) and value.startswith(tempfile.gettempdir() + "/"):
        return f"<tmp>/{Path(value).name}"
    return value
