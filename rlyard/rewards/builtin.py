"""Reward functions for the common cases, in TRL's signature so that they mix with TRL's own.

Each takes `completions` (strings, or `[{"role": "assistant", "content": ...}]` lists) and the
columns it names, returns one float per completion, and returns `None` where its column is
missing for a row (not applicable: the sample is graded by the other functions, or flagged).
"""
from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

from rlyard.rewards.isolated import IsolatedFunction, Overran
from rlyard.rewards.mathcheck import exact_value, final_answer, last_boxed

_MATH_VERIFY = IsolatedFunction("rlyard.rewards.mathcheck:math_verify_equal", timeout_s=5.0)

_FENCED_JSON = re.compile(r"```(?:json)?\s*\n(.*?)```", re.S)
_THINK = re.compile(r"^<think>\n(?!.*<think>)(.*?)</think>.*$", re.S)


def completion_text(completion: Any) -> str:
    """The text of one completion in either TRL format."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    raise TypeError(f"a completion is a string or a list of messages, got {type(completion).__name__}")


def _normal(text: str) -> str:
    return " ".join(str(text).split()).strip().lower()


def exact_match(completions: list, answer: list, **kwargs) -> list[float | None]:
    """1.0 when the reply (case and spacing aside) is the answer, or its last line is."""
    rewards: list[float | None] = []
    for completion, gold in zip(completions, answer, strict=True):
        if gold is None:
            rewards.append(None)
            continue
        text = completion_text(completion).strip()
        last_line = text.splitlines()[-1] if text else ""
        rewards.append(float(_normal(gold) in (_normal(text), _normal(last_line))))
    return rewards


def regex_match(completions: list, pattern: list, **kwargs) -> list[float | None]:
    """1.0 when the row's `pattern` (a Python regex) matches somewhere in the reply."""
    rewards: list[float | None] = []
    for completion, rule in zip(completions, pattern, strict=True):
        rewards.append(None if rule is None else float(re.search(rule, completion_text(completion), re.S) is not None))
    return rewards


def math_equal(completions: list, answer: list | None = None, solution: list | None = None, **kwargs) -> list[float | None]:
    """1.0 when the reply's final answer equals the row's `answer` (or TRL's `solution`) as math.

    With math-verify installed (`pip install math-verify`), its LaTeX-aware verdict, computed in a
    child process killed after 5 s (a reply can stall it: rlyard/rewards/isolated.py); a reply
    that overruns scores 0. Without it, the exact value of the last \\boxed{} or number against
    the gold's (never `eval`: rlyard/rewards/mathcheck.py), else the two as normalised text.
    None where the row has neither column, or math-verify cannot read the gold answer.
    """
    golds = answer if answer is not None else solution
    if golds is None:
        return [None] * len(completions)
    use_math_verify = importlib.util.find_spec("math_verify") is not None
    rewards: list[float | None] = []
    for completion, gold in zip(completions, golds, strict=True):
        text = completion_text(completion)
        if gold is None:
            rewards.append(None)
        elif use_math_verify:
            try:
                verdict = _MATH_VERIFY(str(gold), text)
            except Overran:
                verdict = False
            rewards.append(None if verdict is None else float(verdict))
        else:
            rewards.append(float(_equal_exactly(str(gold), final_answer(text))))
    return rewards


def _equal_exactly(gold: str, given: str | None) -> bool:
    if given is None:
        return False
    gold_value, given_value = exact_value(gold), exact_value(given)
    if gold_value is not None and given_value is not None:
        return gold_value == given_value
    return _normal(gold) == _normal(given)


def _json_of(text: str) -> tuple[bool, Any]:
    """(parsed, value) of a reply that is JSON, or holds one fenced ```json block."""
    fenced = _FENCED_JSON.findall(text)
    for candidate in [text.strip(), *(block.strip() for block in fenced)]:
        try:
            return True, json.loads(candidate)
        except (ValueError, RecursionError):  # not JSON, nested past the parser's depth, an integer past the digit limit
            continue
    return False, None


def json_valid(completions: list, **kwargs) -> list[float]:
    """1.0 when the reply is JSON (as a whole, or in a fenced ```json block)."""
    return [float(_json_of(completion_text(c))[0]) for c in completions]


def json_schema(completions: list, schema: list, **kwargs) -> list[float | None]:
    """1.0 when the reply is JSON valid against the row's `schema` (a dict or its JSON text);
    needs `jsonschema`. An invalid schema is the data's fault: it raises (the sample is flagged)."""
    import jsonschema

    rewards: list[float | None] = []
    for completion, rule in zip(completions, schema, strict=True):
        if rule is None:
            rewards.append(None)
            continue
        rule = json.loads(rule) if isinstance(rule, str) else rule
        jsonschema.Draft202012Validator.check_schema(rule)
        parsed, value = _json_of(completion_text(completion))
        rewards.append(float(parsed and jsonschema.Draft202012Validator(rule).is_valid(value)))
    return rewards


def think_format(completions: list, **kwargs) -> list[float]:
    """1.0 for `<think>\\n...</think>` then the answer (one think block, first in the reply)."""
    return [float(_THINK.match(completion_text(c)) is not None) for c in completions]


def boxed_format(completions: list, **kwargs) -> list[float]:
    """1.0 when the reply puts an answer in \\boxed{...}."""
    return [float(last_boxed(completion_text(c)) is not None) for c in completions]
