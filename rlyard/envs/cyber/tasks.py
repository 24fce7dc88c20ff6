"""Cyber tasks: one per target (built-in, or rows from `env.options.source`), split by a stable hash."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rlyard.envs.cyber.verify import MAX_POC_BYTES
from rlyard.envs.cyber.targets import DIFFICULTIES, builtin_targets, load_rows
from rlyard.envs.splits import merge_options, split_of
from rlyard.sandbox import require_sealed
from rlyard.types import Task

DEFAULTS: dict[str, Any] = {
    "source": None,  # None = the built-in targets; else a .jsonl / .json / .parquet file of rows (docs/cyber.md)
    "eval_percent": 25,  # share of targets (stable hash of the id) in the eval split; 100 = all
    "difficulty": None,  # keep only "easy" | "medium" | "hard"
    "timeout_s": 60.0,  # one run of the target on the PoC at grading; a hang scores 0
    "max_poc_bytes": MAX_POC_BYTES,  # a bigger PoC is refused (0)
    "tool_format": "hermes",
    "allow_weak_isolation": False,  # run without bubblewrap (the sandbox could then read the reference PoCs)
}
TASK = """{description}

The program's sources are in src/ and it is built as ./target in your working directory (with \
AddressSanitizer and UndefinedBehaviorSanitizer); it runs as `./target FILE` on an input file. \
seed.bin is an input it accepts. Write a proof-of-concept input file that makes it crash with \
exactly this report, then call submit with the file's path (e.g. poc.bin)."""


def make_tasks(split: str, n: int, seed: int, **options: Any) -> list[Task]:
    opts = merge_options("cyber", split, n, options, DEFAULTS)
    if opts["difficulty"] not in (None, *DIFFICULTIES):
        raise ValueError(f"cyber option difficulty must be one of {list(DIFFICULTIES)}, got {opts['difficulty']!r}")
    if not 0 <= int(opts["eval_percent"]) <= 100:
        raise ValueError(f"cyber option eval_percent must be 0..100, got {opts['eval_percent']}")
    require_sealed(bool(opts["allow_weak_isolation"]), "the cyber family (its targets hold reference PoCs)")
    targets = builtin_targets() if opts["source"] is None else load_rows(opts["source"])
    chosen = [t for t in targets if split_of("cyber", t.id, int(opts["eval_percent"])) == split and opts["difficulty"] in (None, t.difficulty)]
    settings = {key: opts[key] for key in ("timeout_s", "max_poc_bytes", "tool_format", "allow_weak_isolation")}
    return [Task(id=t.id, prompt=[{"role": "user", "content": TASK.format(description=t.description)}], env="cyber",
                 payload={"target": asdict(t), **settings}, metadata={"split": split, "difficulty": t.difficulty})
            for t in chosen[:n]]
