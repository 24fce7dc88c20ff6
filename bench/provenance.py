"""What every result file records about where its figures come from: the code version."""
from __future__ import annotations

import subprocess


def commit() -> str:
    """The commit the figures come from (`+dirty` when tracked files had uncommitted changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


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
