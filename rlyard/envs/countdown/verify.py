"""Grade a countdown reply: parse the final expression safely, check the numbers, compare.

The expression is never `eval`-ed. A character allow-list rejects names and calls before parsing,
`ast` gives the tree, and a tiny interpreter walks only numbers, + - * /, unary minus and
brackets, in exact fractions so "(7 / 3) * 3" is exactly 7. Every failure is a 0 reward with a
reason in `info`, never an exception: the policy can write anything.
"""
from __future__ import annotations

import ast
import re
from collections import Counter
from fractions import Fraction

from rlyard.types import Reward, Task

MAX_EXPRESSION_CHARS = 300  # real answers are < 60 chars; also bounds nesting depth for `ast`
MAX_MAGNITUDE = 10**15  # no sensible answer needs more; stops "25*25*25*..." from growing
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_ALLOWED_CHARS = re.compile(r"[0-9 \t\n+\-*/().]+")  # ASCII only: no names, no odd whitespace
_LABEL = re.compile(r"^\s*[A-Za-z][A-Za-z ]{0,30}:")  # "Answer:", "Final expression:"
_SYMBOLS = str.maketrans({"\u00d7": "*", "\u22c5": "*", "\u00f7": "/", "\u2212": "-", "\u2013": "-"})
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class InvalidExpression(ValueError):
    """The reply's expression is not a plain arithmetic expression we can evaluate."""


def extract_expression(reply: str) -> str | None:
    """The content of the last <answer> tag, else the last line that looks like arithmetic.

    A trailing "= 24" is dropped: the model's claimed result is not evidence, the left side is.
    """
    tagged = _ANSWER.findall(reply)
    if tagged:
        return _clean(tagged[-1])
    for line in reversed(reply.splitlines()):
        candidate = _clean(_LABEL.sub("", line))
        if candidate and _ALLOWED_CHARS.fullmatch(candidate) and any(c.isdigit() for c in candidate):
            return candidate
    return None


def evaluate(expression: str) -> tuple[Fraction, list[int]]:
    """(exact value, numbers used in order); raises InvalidExpression on anything else."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise InvalidExpression(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    if not _ALLOWED_CHARS.fullmatch(expression):
        raise InvalidExpression("only digits, + - * /, and parentheses are allowed")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise InvalidExpression(f"not an expression: {type(err).__name__}") from None
    used: list[int] = []
    return _eval(tree.body, used), used


def verify(reply: str, task: Task) -> Reward:
    """1.0 when the final expression uses only the given numbers and equals the target."""
    numbers, target = task.payload["numbers"], task.payload["target"]
    expression = extract_expression(reply)
    value, used, error = None, [], ""
    if expression is None:
        error = "no <answer> tag and no line that looks like an expression"
    else:
        try:
            value, used = evaluate(expression)
        except InvalidExpression as err:
            error = str(err)
    valid = value is not None
    extra = Counter(used) - Counter(numbers)  # uses beyond what was given
    allowed = valid and not extra
    correct = allowed and abs(value - target) < 1e-6
    if valid and not allowed:
        error = f"uses numbers not given, or more often than given: {sorted(extra.elements())}"
    return Reward(
        value=1.0 if correct else 0.0,
        components={
            "correct": float(correct),
            "valid_expression": float(valid),
            "uses_allowed_numbers": float(allowed),
        },
        info={
            "expression": expression,
            "value": None if value is None else float(value),
            "numbers_used": used,
            "target": target,
            "error": error,
        },
    )


def _clean(text: str) -> str:
    """Normalize what models wrap answers in: unicode operators, $...$, `...`, "= result"."""
    text = text.translate(_SYMBOLS).strip().strip("$`").strip()
    return text.split("=", 1)[0].strip()


def _eval(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return _bounded(Fraction(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, used)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, used), _eval(node.right, used)
        if isinstance(node.op, ast.Add):
            return _bounded(left + right)
        if isinstance(node.op, ast.Sub):
            return _bounded(left - right)
        if isinstance(node.op, ast.Mult):
            return _bounded(left * right)
        if right == 0:
            raise InvalidExpression("division by zero")
        return _bounded(left / right)
    what = type(node.op if isinstance(node, (ast.BinOp, ast.UnaryOp)) else node).__name__  # "Pow", "Call"
    raise InvalidExpression(f"{what} is not allowed (numbers, + - * / and brackets only)")


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise InvalidExpression(f"intermediate value beyond {MAX_MAGNITUDE:.0e}")
    return value
