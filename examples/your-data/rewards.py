"""Reward functions for examples/your-data/prompts.jsonl, in TRL's signature.

rlyard calls each one once per batch of samples with `completions` and the data's other
columns (`answer`, `topic`) as lists; return one float per completion, or None where the
function does not apply (the other functions grade that sample).
"""
import re


def _text(completion):
    # string prompts give string completions; chat prompts give [{"role": "assistant", "content": ...}]
    return completion if isinstance(completion, str) else completion[0]["content"]


def final_number(text):
    """The last \\boxed{...} number, else the last number of the reply."""
    boxed = re.findall(r"\\boxed\{\s*(-?\d+)\s*\}", text)
    numbers = boxed or re.findall(r"-?\d+", text)
    return numbers[-1] if numbers else None


def correct(completions, answer, **kwargs):
    """1.0 when the reply's final number is the answer."""
    return [1.0 if final_number(_text(c)) == gold else 0.0 for c, gold in zip(completions, answer)]


def boxed(completions, **kwargs):
    """0.2 for putting the final number in \\boxed{}: a small format bonus."""
    return [0.2 if re.search(r"\\boxed\{\s*-?\d+\s*\}", _text(c)) else 0.0 for c in completions]
