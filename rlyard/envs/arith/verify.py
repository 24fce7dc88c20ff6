"""Grade an arithmetic reply: the last number the model wrote is its answer.

"Last number" is robust to the formats small models drift into ("= 19.", "**19**", "$19$",
"The answer is 19.", "10 + 9 = 19") and cannot be gamed by listing many numbers: only the final
one counts. An explicit `\\boxed{...}` wins over trailing text, since it marks the answer.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from rlyard.types import Reward, Task

# Thousands groups ("1,234") before plain digits so "1,234" is one number; an optional
# decimal part so "19.5" is not read as 19. A leading "-" is a sign only where it cannot be
# a binary minus (checked in `numbers_in`).
_NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?")
_BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})


def numbers_in(text: str) -> list[Decimal]:
    """Every number in `text`, in order; "37-45" is 37 and 45, "= -8" is -8."""
    found = []
    for match in _NUMBER.finditer(text.translate(_MINUS_SIGNS)):
        token, start = match.group(), match.start()
        if token.startswith("-") and start > 0 and (text[start - 1].isalnum() or text[start - 1] in ")]}"):
            token = token[1:]  # "x-5" or "(a)-5": a binary minus, not a negative number
        try:
            found.append(Decimal(token.replace(",", "")))
        except InvalidOperation:  # unreachable for regex matches; kept so grading never raises
            continue
    return found


def extract_answer(reply: str) -> Decimal | None:
    """The model's final answer: the last number of the last `\\boxed{}`, else of the reply."""
    for boxed in reversed(_BOXED.findall(reply)):
        inside = numbers_in(boxed)
        if inside:
            return inside[-1]
    found = numbers_in(reply)
    return found[-1] if found else None


def verify(reply: str, task: Task) -> Reward:
    """1.0 when the extracted answer equals `task.payload["answer"]` exactly, else 0.0."""
    expected = int(task.payload["answer"])
    answer = extract_answer(reply)
    correct = answer is not None and answer == expected
    return Reward(
        value=1.0 if correct else 0.0,
        components={"correct": float(correct), "has_answer": float(answer is not None)},
        info={"extracted": _plain(answer), "expected": expected},
    )


def _plain(number: Decimal | None) -> int | float | None:
    """A JSON-friendly copy for logs: int when whole and not absurdly long, float otherwise."""
    if number is None:
        return None
    if number == number.to_integral_value() and number.adjusted() < 30:
        return int(number)
    return float(number)
