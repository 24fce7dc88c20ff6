"""Is a reply's final answer equal to the gold one, as math? Without trusting the reply.

Two checkers. `math_verify_equal` (math-verify, LaTeX-aware) builds sympy objects from the reply
and can be stalled by it, so `rlyard.rewards.math_equal` only ever runs it in a killable child
process (`rlyard.rewards.isolated`). `exact_value`, the fallback without math-verify, never
hands reply text to `eval` / `sympify` (sympify runs Python: `\\boxed{__import__('os')...}`):
it reads numbers, fractions and + - * / ^ through a whitelisted AST into exact fractions, with
powers bounded, and anything else is not a number.
"""
from __future__ import annotations

import ast
import re
from fractions import Fraction

_BOXED = re.compile(r"\\boxed\s*\{")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
MAX_CHARS = 200  # longer answers are not read as numbers
MAX_EXPONENT = 64
MAX_BASE = 10 ** 6


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


def exact_value(text: str) -> Fraction | None:
    """The exact value of a numeric answer (`3`, `-0.5`, `1/2`, `\\frac{3}{4}`, `2^{10}`, `1,000`), or None."""
    expression = text.strip().strip("$").replace("\\left", "").replace("\\right", "").replace("\\!", "")
    if len(expression) > MAX_CHARS:
        return None
    while _FRAC.search(expression):
        expression = _FRAC.sub(r"((\1)/(\2))", expression)
    expression = (expression.replace("\\cdot", "*").replace("\\times", "*").replace("{", "(").replace("}", ")")
                  .replace("^", "**").replace("−", "-"))
    expression = re.sub(r"(?<=\d),(?=\d{3}\b)", "", expression)
    try:
        return _value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div):
            return left / right
        if isinstance(node.op, ast.Pow):
            if right.denominator != 1 or abs(right) > MAX_EXPONENT or abs(left) > MAX_BASE:
                raise ValueError("power out of bounds")
            return left ** int(right)
    raise ValueError(f"not arithmetic: {type(node).__name__}")


def math_verify_equal(gold: str, text: str) -> bool | None:
    """math-verify's verdict on the reply's last \\boxed{} (or the whole reply), None when it cannot
    read the gold answer. Run it in `rlyard.rewards.isolated` (it is this module's child entry)."""
    from math_verify import parse, verify

    gold_parsed = parse(gold if "$" in gold or "\\" in gold else f"${gold}$", parsing_timeout=5)
    if not gold_parsed:
        return None
    boxed = last_boxed(text)
    answer = parse(f"$\\boxed{{{boxed}}}$" if boxed is not None else text, parsing_timeout=5)
    return bool(verify(gold_parsed, answer, timeout_seconds=3))
