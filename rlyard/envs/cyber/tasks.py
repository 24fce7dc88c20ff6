"""Cyber tasks: one per target (built-in, rows from `env.options.source`, or `source: generated`).

Built-in targets and rows are split by a stable hash of their id; generated targets
(generate.py) by their format x bug combination, 8 of 40 held out for eval."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rlyard.envs.cyber.generate import make_generated
from rlyard.envs.cyber.verify import MAX_POC_BYTES
from rlyard.envs.cyber.targets import DIFFICULTIES, Target, builtin_targets, load_rows
from rlyard.envs.splits import merge_options, split_of
from rlyard.sandbox import require_sealed
from rlyard.types import Task

DEFAULTS: dict[str, Any] = {
    "source": None,  # None = the built-in targets; "generated" = generate.py's; else a .jsonl / .json / .parquet file of rows (docs/cyber.md)
    "eval_percent": 25,  # share of targets (stable hash of the id) in the eval split; 100 = all (generated: 0 / 100 = all in one split)
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
    settings = {key: opts[key] for key in ("timeout_s", "max_poc_bytes", "tool_format", "allow_weak_isolation")}
    if opts["source"] == "generated":
        return generated_tasks(split, n, seed, int(opts["eval_percent"]), opts["difficulty"], settings)
    targets = builtin_targets() if opts["source"] is None else load_rows(opts["source"])
    chosen = [t for t in targets if split_of("cyber", t.id, int(opts["eval_percent"])) == split and opts["difficulty"] in (None, t.difficulty)]
    return [task(t, split, settings) for t in chosen[:n]]


def task(target: Target, split: str, settings: dict[str, Any], spec: dict | None = None) -> Task:
    """One target as a task; a generated one also carries its spec (the oracle reads it)."""
    extra = {"spec": spec} if spec is not None else {}
    metadata = {"split": split, "difficulty": target.difficulty}
    if spec is not None:
        metadata.update(format=spec["format"], bug=spec["bug"])
    return Task(id=target.id, prompt=[{"role": "user", "content": TASK.format(description=target.description)}], env="cyber",
                payload={"target": asdict(target), **settings, **extra}, metadata=metadata)


def generated_tasks(split: str, n: int, seed: int, eval_percent: int, difficulty: str | None, settings: dict[str, Any]) -> list[Task]:
    """`n` generated targets: eval = the held-out combinations, train = the rest; eval_percent 100
    puts every combination in eval (validate), 0 every one in train."""
    stream = {0: "all" if split == "train" else None, 100: "all" if split == "eval" else None}.get(eval_percent, split)
    if stream is None or n == 0:
        return []
    return [task(target, split, settings, asdict(spec)) for spec, target in make_generated(stream, n, seed, difficulty)]
