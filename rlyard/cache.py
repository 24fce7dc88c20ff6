"""Where rlyard keeps what it builds once: the converted model, code-task venvs and node ids."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$RLYARD_CACHE`, else `~/.cache/rlyard` (an empty variable counts as unset)."""
    return Path(os.environ.get("RLYARD_CACHE") or Path.home() / ".cache" / "rlyard")
