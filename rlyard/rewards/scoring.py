"""Scoring a rollout's samples with Python reward functions, TRL's way, without losing a run.

Every function is called once per rollout with the whole batch (async ones concurrently). The
weighted sum of what they return is the reward; a `None` means "not applicable to this sample"
and leaves that function out of its sum. What a broken function does is never a silent 0 and
never a crash: a raise is retried sample by sample so that only the samples it fails on are
lost, and those, like samples given a wrong-length list, a NaN or a non-number, are flagged
`infra_error` (dropped from their group before advantages) with the reason in `Reward.info`.
A sample for which every function said `None` is flagged too: nothing graded it.
"""
from __future__ import annotations

import asyncio
import math
import sys
import traceback
from dataclasses import replace
from typing import Any

from rlyard.environment import Family
from rlyard.rewards.loading import RewardFunction
from rlyard.types import Reward, Task


def reward_inputs(tasks: list[Task], texts: list[str]) -> tuple[list, list, dict[str, list]]:
    """(prompts, completions, columns) in TRL's formats: a task whose data row had a string prompt
    ("standard") gets strings; chat prompts get message lists and `[{"role": "assistant", ...}]`."""
    prompts, completions = [], []
    for task, text in zip(tasks, texts):
        if task.metadata.get("prompt_format") == "standard":
            prompts.append(task.metadata["prompt_text"])
            completions.append(text)
        else:
            prompts.append(list(task.prompt))
            completions.append([{"role": "assistant", "content": text}])
    keys = sorted({key for task in tasks for key in task.payload})
    columns = {key: [task.payload.get(key) for task in tasks] for key in keys}
    return prompts, completions, columns


class _Log:
    """TRL's `log_extra(column, values)` and `log_metric(name, value)`: kept with the samples."""

    def __init__(self, size: int):
        self.extra: list[dict[str, Any]] = [{} for _ in range(size)]
        self.metrics: dict[str, float] = {}

    def log_extra(self, column: str, values: list) -> None:
        for row, value in zip(self.extra, values):
            row[column] = value

    def log_metric(self, name: str, value: float) -> None:
        self.metrics[name] = float(value)


def _arguments(function: RewardFunction, everything: dict[str, Any]) -> dict[str, Any]:
    return everything if function.accepts_any else {k: v for k, v in everything.items() if k in function.accepted}


def _call(function: RewardFunction, everything: dict[str, Any]) -> Any:
    result = function.fn(**_arguments(function, everything))
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


async def _call_async_all(functions: list[RewardFunction], everything: dict[str, Any]) -> list:
    async def one(function):
        try:
            return await function.fn(**_arguments(function, everything))
        except Exception as error:
            return _Raised(error)
    return await asyncio.gather(*(one(f) for f in functions))


class _Raised:
    """What a raising function left: its traceback's last frames (the function's own), unchained."""

    def __init__(self, error: BaseException):
        report = traceback.TracebackException.from_exception(error, limit=-4)
        report.stack = traceback.StackSummary.from_list([f for f in report.stack if f.filename != __file__])
        self.trace = "".join(report.format(chain=False))


def _checked(function: RewardFunction, output: Any, size: int) -> tuple[list[float | None], list[str | None]]:
    """(values, errors) per sample from what a function returned for `size` samples."""
    if isinstance(output, _Raised):
        return [None] * size, [f"{function.name} raised:\n{output.trace}"] * size
    try:
        output = list(output)
    except TypeError:
        return [None] * size, [f"{function.name} returned a {type(output).__name__}, not a list of {size} floats"] * size
    if len(output) != size:
        return [None] * size, [f"{function.name} returned {len(output)} values for {size} samples (one per completion, "
                               "in order, is expected)"] * size
    values: list[float | None] = []
    errors: list[str | None] = []
    for value in output:
        if value is None:
            values.append(None)
            errors.append(None)
        elif isinstance(value, (int, float)) or hasattr(value, "__float__") and not isinstance(value, str):
            number = float(value)
            bad = not math.isfinite(number)
            values.append(None if bad else number)
            errors.append(f"{function.name} returned {number} (not finite)" if bad else None)
        else:
            values.append(None)
            errors.append(f"{function.name} returned {value!r} ({type(value).__name__}), not a float or None")
    return values, errors


def _per_sample(function: RewardFunction, everything: dict[str, Any], size: int) -> tuple[list, list]:
    """A batch call that raised, again one sample at a time: only the samples it fails on are lost."""
    values, errors = [], []
    for index in range(size):
        one = {key: [value[index]] if isinstance(value, list) and len(value) == size else value
               for key, value in everything.items()}
        try:
            output = _call(function, one)
        except Exception as error:
            output = _Raised(error)
        value, error = _checked(function, output, 1)
        values += value
        errors += error
    return values, errors


def score_samples(functions: list[RewardFunction], tasks: list[Task], texts: list[str],
                  completion_ids: list[list[int]], warned: set[str] | None = None) -> list[Reward]:
    """One Reward per sample: the weighted sum of the functions' values, or an infra failure.
    A failure is said on stderr once per distinct message in `warned` (one set per run)."""
    size = len(tasks)
    prompts, completions, columns = reward_inputs(tasks, texts)
    log = _Log(size)
    everything = {**columns, "prompts": prompts, "completions": completions, "completion_ids": completion_ids,
                  "log_extra": log.log_extra, "log_metric": log.log_metric}
    outputs: dict[str, Any] = {}
    for function in (f for f in functions if not f.is_async):
        try:
            outputs[function.name] = _call(function, everything)
        except Exception as error:
            outputs[function.name] = _Raised(error)
    concurrent = [f for f in functions if f.is_async]
    if concurrent:
        outputs.update(zip((f.name for f in concurrent), asyncio.run(_call_async_all(concurrent, everything))))
    results = {f.name: _per_sample(f, everything, size) if isinstance(outputs[f.name], _Raised) and size > 1
               else _checked(f, outputs[f.name], size) for f in functions}
    warned = set() if warned is None else warned
    return [_combine(functions, results, index, log, warned) for index in range(size)]


def _combine(functions: list[RewardFunction], results: dict[str, tuple[list, list]], index: int, log: _Log,
             warned: set[str]) -> Reward:
    components, errors, total, graded = {}, [], 0.0, False
    for function in functions:
        values, function_errors = results[function.name]
        if function_errors[index] is not None:
            errors.append(function_errors[index])
        elif values[index] is not None:
            components[function.name] = values[index]
            total += function.weight * values[index]
            graded = True
    info: dict[str, Any] = {**({"extra": log.extra[index]} if log.extra[index] else {}),
                            **({"metrics": log.metrics} if log.metrics else {})}
    if errors:
        _warn_once(errors[0], warned)
        return Reward(0.0, components, {**info, "error": "\n".join(errors)}, infra_error=True)
    if not graded:
        return Reward(0.0, {}, {**info, "error": "every reward function returned None for this sample: nothing graded it"},
                      infra_error=True)
    return Reward(total, components, info)


def _warn_once(error: str, warned: set[str]) -> None:
    """A broken reward function is said once on stderr (every sample it fails is flagged anyway)."""
    head = error.splitlines()[0]
    if head not in warned:
        warned.add(head)
        print(f"[rlyard] reward function failure (the samples are flagged infra_error, not scored 0): {error.strip()}",
              file=sys.stderr, flush=True)


def with_rewards(family: Family, functions: list[RewardFunction]) -> Family:
    """The family with `functions` as its grader: the rollout scores each batch with one call each."""
    warned: set[str] = set()

    def score_batch(tasks: list[Task], texts: list[str], completion_ids: list[list[int]]) -> list[Reward]:
        return score_samples(functions, tasks, texts, completion_ids, warned)
    names = " + ".join(f"{f.weight:g} x {f.name}" if f.weight != 1 else f.name for f in functions)
    return replace(family, score_batch=score_batch, description=f"{family.description} [rewards: {names}]".strip())

