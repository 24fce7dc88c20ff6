"""The exact test node ids of a task, collected once from its gold tree in the sandbox and cached.

The grader must know on the host which tests have to pass; for built-in tasks the test command
names files, and parametrized tests expand into ids only pytest knows. So pytest collects them,
with the same runner and sandbox Python that grade, from trusted files (the reference fix plus
the test patch, before any policy touched them); the list is cached under $RLYARD_CACHE by a
hash of the files, the arguments and the runner.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
from pathlib import Path

from rlyard.cache import cache_dir
from rlyard.envs.code.grade_runner import read_verdict
from rlyard.envs.code.repo import write_files
from rlyard.sandbox import Limits, Sandbox

LIMITS = Limits(wall_s=120, cpu_s=120, output_bytes=1 << 20)


def collect_node_ids(files: dict[str, str], tests: list[str], command: str) -> list[str]:
    """Node ids pytest collects for `tests` in a tree of `files` (`command`: the runner command, with
    `--collect` inserted by the caller). Raises ValueError when collection fails."""
    key = hashlib.sha256(json.dumps([sorted(files.items()), tests, command]).encode()).hexdigest()[:32]
    cached = cache_dir() / "code-collect" / f"{key}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    with tempfile.TemporaryDirectory(prefix="rlyard-collect-") as tmp:
        write_files(Path(tmp), files)
        token = secrets.token_hex(16)
        result = Sandbox(Path(tmp), LIMITS).run(["/bin/bash", "-c", command], stdin=json.dumps({"token": token}))
    verdict = read_verdict(result.stdout.decode("utf-8", "replace"), token)
    if not verdict or not verdict.get("collected"):
        raise ValueError(f"collecting {' '.join(tests)} failed (exit {result.exit_code}):\n{result.text[-3000:]}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")  # not observe.write_atomic: it would pull in matplotlib
    partial.write_text(json.dumps(verdict["collected"]))
    partial.replace(cached)
    return verdict["collected"]
