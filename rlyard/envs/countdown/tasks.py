"""Countdown problems: reach a target from a few numbers with + - * /, held-out eval split.

Every task is built backwards from a random expression over its numbers, so it is solvable by
construction; that expression is kept in `metadata["solution"]`. Intermediate results stay
positive integers (the game's usual rule), which keeps solutions readable. The split of a problem
is a stable hash of its canonical text (sorted numbers and target), about 10% eval.
"""
from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from rlyard.envs.splits import merge_options
from rlyard.envs.splits import split_of as shared_split_of
from rlyard.types import Task

DEFAULTS: dict[str, Any] = {
    "num_count": 3,  # how many numbers the model is given (2..6)
    "min_number": 1,
    "max_number": 25,
    "min_target": 10,  # below this, "a - b" answers would dominate the random expressions
    "max_target": 100,
    "system_prompt": None,  # None: no system message, the chat template adds its own default
}
PROMPT = (
    "Using the numbers {numbers}, write an arithmetic expression that equals {target}. "
    "You may use +, -, * and / with parentheses, and each number at most once. "
    "Put the final expression in <answer> </answer> tags, for example <answer>(1 + 2) * 3</answer>."
)


def split_of(canonical: str) -> str:
    """The split a problem lives in; stable across runs, machines and Python versions."""
    return shared_split_of("countdown", canonical)


def canonical(numbers: list[int], target: int) -> str:
    """Order-free problem text, e.g. "3,7,12=24": the same numbers in any order are one problem."""
    return ",".join(map(str, sorted(numbers))) + f"={target}"


def random_solution(rng: random.Random, numbers: list[int]) -> tuple[int, str]:
    """Combine all `numbers` pairwise at random into (value, expression); never a fraction or <= 0."""
    items = [(Fraction(v), str(v)) for v in numbers]
    while len(items) > 1:
        i, j = rng.sample(range(len(items)), 2)
        (a, a_text), (b, b_text) = items[i], items[j]
        if a < b:  # larger first, so "-" stays positive and "/" has a chance to be exact
            (a, a_text), (b, b_text) = (b, b_text), (a, a_text)
        choices = ["+", "*"] + (["-"] if a > b else []) + (["/"] if a % b == 0 and b != 1 else [])
        op = rng.choice(choices)
        value = a + b if op == "+" else a * b if op == "*" else a - b if op == "-" else a / b
        items = [item for k, item in enumerate(items) if k not in (i, j)]
        items.append((value, f"({a_text} {op} {b_text})"))
    value, text = items[0]
    return int(value), text[1:-1] if len(numbers) > 1 else text  # drop the outermost brackets


def make_tasks(split: str, n: int, seed: int, **options: Any) -> list[Task]:
    """`n` solvable tasks of `split`, deterministic in (split, n, seed, options).

    train may repeat a problem (repeats share an id); eval holds distinct problems and the first
    k eval tasks do not depend on `n`.
    """
    opts = _check_options(split, n, options)
    rng = random.Random(f"countdown|{split}|{seed}")
    tasks: list[Task] = []
    seen: set[str] = set()
    budget = 10_000 + 500 * n  # draws before declaring the options (nearly) infeasible
    while len(tasks) < n:
        if budget == 0:
            raise ValueError(
                f"found only {len(tasks)} of n={n} {split} problems with options {opts}; "
                "widen min_target..max_target or max_number, or ask for fewer"
            )
        budget -= 1
        numbers = [rng.randint(opts["min_number"], opts["max_number"]) for _ in range(opts["num_count"])]
        target, solution = random_solution(rng, numbers)
        # A target equal to a given number is solved by copying it: no arithmetic to learn.
        if not opts["min_target"] <= target <= opts["max_target"] or target in numbers:
            continue
        text = canonical(numbers, target)
        if split_of(text) != split or (split == "eval" and text in seen):
            continue
        seen.add(text)
        tasks.append(_task(split, sorted(numbers), target, solution, opts))
    return tasks


def _task(split: str, numbers: list[int], target: int, solution: str, opts: dict[str, Any]) -> Task:
    text = canonical(numbers, target)
    prompt = [] if opts["system_prompt"] is None else [{"role": "system", "content": opts["system_prompt"]}]
    prompt.append({"role": "user", "content": PROMPT.format(numbers=numbers, target=target)})
    return Task(
        id=f"countdown-{split}-{text}",
        prompt=prompt,
        env="countdown",
        payload={"numbers": numbers, "target": target},
        metadata={"split": split, "problem": text, "solution": solution},
    )


def _check_options(split: str, n: int, options: dict[str, Any]) -> dict[str, Any]:
    """Merge options over the defaults; raise with the allowed values on anything unknown."""
    opts = merge_options("countdown", split, n, options, DEFAULTS)
    for key in ("num_count", "min_number", "max_number", "min_target", "max_target"):
        if isinstance(opts[key], bool) or not isinstance(opts[key], int):
            raise ValueError(f"{key} must be an int, got {opts[key]!r}")
    if not 2 <= opts["num_count"] <= 6:
        raise ValueError(f"num_count must be in 2..6, got {opts['num_count']}")
    if not 1 <= opts["min_number"] <= opts["max_number"]:
        raise ValueError(
            f"need 1 <= min_number <= max_number, got min_number={opts['min_number']}, max_number={opts['max_number']}"
        )
    if not 1 <= opts["min_target"] <= opts["max_target"]:
        raise ValueError(
            f"need 1 <= min_target <= max_target, got min_target={opts['min_target']}, max_target={opts['max_target']}"
        )
    if opts["system_prompt"] is not None and not isinstance(opts["system_prompt"], str):
        raise ValueError(f"system_prompt must be a string or None, got {opts['system_prompt']!r}")
    return opts
