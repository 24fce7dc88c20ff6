"""Reward functions for the common cases, in TRL's signature so that they mix with TRL's own.

Each takes `completions` (strings, or `[{"role": "assistant", "content": ...}]` lists) and the
columns it names, returns one float per completion, and returns `None` where its column is
missing for a row (not applicable: the sample is graded by the other functions, or flagged).
"""
from __future__ import annotations

import json
import re
import threading
from typing import Any

_BOXED = re.compile(r"\\boxed\s*\{")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
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


def last_boxed(text: str) -> str | None:
    """The contents of the last \\boxed{...} (braces balanced), or None."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for index in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[start:index]
    return None


def final_answer(text: str) -> str | None:
    """What a math reply answers: its last \\boxed{}, else its last number."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def _equal_sympy(gold: str, given: str) -> bool:
    import sympy

    try:
        difference = sympy.simplify(sympy.sympify(gold.replace("^", "**")) - sympy.sympify(given.replace("^", "**")))
        return bool(difference == 0)
    except (sympy.SympifyError, TypeError, SyntaxError, ValueError, AttributeError):
        return _normal(gold) == _normal(given)


def _equal_math_verify(gold: str, text: str) -> bool | None:
    """math-verify's verdict (LaTeX-aware), None when it cannot read the gold answer."""
    from math_verify import parse, verify

    main = threading.current_thread() is threading.main_thread()  # math-verify's timeouts use signals
    timeout = {"parsing_timeout": 5 if main else None}
    gold_parsed = parse(gold if "$" in gold or "\\" in gold else f"${gold}$", **timeout)
    if not gold_parsed:
        return None
    boxed = last_boxed(text)
    answer = parse(f"$\\boxed{{{boxed}}}$" if boxed is not None else text, **timeout)
    return bool(verify(gold_parsed, answer, timeout_seconds=3 if main else None))


def math_equal(completions: list, answer: list | None = None, solution: list | None = None, **kwargs) -> list[float | None]:
    """1.0 when the reply's final answer equals the row's `answer` (or TRL's `solution`) as math:
    with math-verify (`pip install math-verify`) when installed, else sympy on the last \\boxed{}
    or number. None where the row has neither column, or math-verify cannot read the gold answer."""
    golds = answer if answer is not None else solution
    if golds is None:
        return [None] * len(completions)
    try:
        import math_verify  # noqa: F401
        use_math_verify = True
    except ImportError:
        use_math_verify = False
    rewards: list[float | None] = []
    for completion, gold in zip(completions, golds, strict=True):
        text = completion_text(completion)
        if gold is None:
            rewards.append(None)
        elif use_math_verify:
            verdict = _equal_math_verify(str(gold), text)
            rewards.append(None if verdict is None else float(verdict))
        else:
            given = final_answer(text)
            rewards.append(0.0 if given is None else float(_equal_sympy(str(gold), given)))
    return rewards


def _json_of(text: str) -> tuple[bool, Any]:
    """(parsed, value) of a reply that is JSON, or holds one fenced ```json block."""
    fenced = _FENCED_JSON.findall(text)
    for candidate in [text.strip(), *(block.strip() for block in fenced)]:
        try:
            return True, json.loads(candidate)
        except json.JSONDecodeError:
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
