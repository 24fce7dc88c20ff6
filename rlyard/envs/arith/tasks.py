"""Arithmetic problems "x op y" with a held-out eval split.

Which split a problem belongs to is a pure function of its canonical text (a stable hash, about
10% eval), so no seed, `n` or option can ever leak an eval problem into training. Each split is
sampled only from its own side by rejection.
"""
from __future__ import annotations

import random
from typing import Any

from rlyard.envs.splits import merge_options
from rlyard.envs.splits import split_of as shared_split_of
from rlyard.types import Task

OPERATORS = "+-*"
DEFAULTS: dict[str, Any] = {
    "ops": "+",
    "min_value": 10,
    "max_value": 99,
    "system_prompt": None,  # None: no system message, the chat template adds its own default
    "template": "What is {x}{op}{y}?",
}


def split_of(canonical: str) -> str:
    """The split a problem lives in; stable across runs, machines and Python versions."""
    return shared_split_of("arith", canonical)


def canonical(x: int, op: str, y: int) -> str:
    """The problem as text, e.g. "37+45"; a negative right operand is bracketed: "5-(-3)"."""
    return f"{x}{op}{y if y >= 0 else f'({y})'}"


def solve(x: int, op: str, y: int) -> int:
    return x + y if op == "+" else x - y if op == "-" else x * y


def make_tasks(split: str, n: int, seed: int, **options: Any) -> list[Task]:
    """`n` tasks of `split`, deterministic in (split, n, seed, options).

    train may repeat a problem (repeats share an id); eval holds distinct problems and the first
    k eval tasks do not depend on `n`, so a longer eval run extends a shorter one.
    """
    opts = _check_options(split, n, options)
    rng = random.Random(f"arith|{split}|{seed}")
    ops, lo, hi = opts["ops"], opts["min_value"], opts["max_value"]
    tasks: list[Task] = []
    seen: set[str] = set()
    budget = 10_000 + 200 * n  # rejection draws before giving up on a too-small eval pool
    while len(tasks) < n:
        if budget == 0:
            raise ValueError(
                f"could only find {len(tasks)} distinct {split} problems for min_value={lo}, "
                f"max_value={hi}, ops={ops!r}; widen the range or ask for fewer than n={n}"
            )
        budget -= 1
        x, op, y = rng.randint(lo, hi), rng.choice(ops), rng.randint(lo, hi)
        text = canonical(x, op, y)
        if split_of(text) != split or (split == "eval" and text in seen):
            continue
        seen.add(text)
        tasks.append(_task(split, x, op, y, opts))
    return tasks


def _task(split: str, x: int, op: str, y: int, opts: dict[str, Any]) -> Task:
    text = canonical(x, op, y)
    y_shown = str(y) if y >= 0 else f"({y})"
    prompt = [] if opts["system_prompt"] is None else [{"role": "system", "content": opts["system_prompt"]}]
    prompt.append({"role": "user", "content": opts["template"].format(x=x, op=op, y=y_shown)})
    return Task(
        id=f"arith-{split}-{text}",
        prompt=prompt,
        env="arith",
        payload={"answer": solve(x, op, y)},
        metadata={"split": split, "problem": text, "op": op},
    )


def _check_options(split: str, n: int, options: dict[str, Any]) -> dict[str, Any]:
    """Merge options over the defaults; raise with the allowed values on anything unknown."""
    opts = merge_options("arith", split, n, options, DEFAULTS)
    ops = opts["ops"]
    if not isinstance(ops, str) or not ops or set(ops) - set(OPERATORS):
        raise ValueError(f"ops must be a non-empty string of characters from {OPERATORS!r}, got {ops!r}")
    opts["ops"] = "".join(dict.fromkeys(ops))  # "++-" would double the weight of "+"
    for key in ("min_value", "max_value"):
        if isinstance(opts[key], bool) or not isinstance(opts[key], int):
            raise ValueError(f"{key} must be an int, got {opts[key]!r}")
    if opts["min_value"] > opts["max_value"]:
        raise ValueError(f"min_value ({opts['min_value']}) must be <= max_value ({opts['max_value']})")
    if opts["system_prompt"] is not None and not isinstance(opts["system_prompt"], str):
        raise ValueError(f"system_prompt must be a string or None, got {opts['system_prompt']!r}")
    template = opts["template"]
    if not isinstance(template, str) or "{x}" not in template or "{y}" not in template:
        raise ValueError(f"template must be a string with {{x}} and {{y}} (and usually {{op}}), got {template!r}")
    try:
        template.format(x=1, op="+", y=2)
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"template {template!r} only may use {{x}}, {{op}} and {{y}}: {err!r}") from None
    return opts
