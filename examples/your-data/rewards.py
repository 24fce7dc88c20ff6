"""Reward functions for examples/your-data/prompts.jsonl, in TRL's signature.

rlyard calls each one once per batch of samples with `completions` and the data's other
columns (`answer`, `topic`) as lists; return one float per completion, or None where the
function does not apply (the other functions grade that sample).
"""
import re


def _text(completion):
    # string prompts give string completions; chat prompts give [{"role": "assistant", "content": ...}]
    return completion if isinstance(completion, str) else completion[0]["content"]


def correct(completions, answer, **kwargs):
    """1.0 when the last \\boxed{} holds the answer."""
    rewards = []
    for completion, gold in zip(completions, answer):
        boxed = re.findall(r"\\boxed\{([^}]*)\}", _text(completion))
        rewards.append(1.0 if boxed and boxed[-1].strip() == gold else 0.0)
    return rewards


def boxed(completions, **kwargs):
    """0.2 for putting some answer in \\boxed{}: a small format bonus."""
    return [0.2 if "\\boxed{" in _text(completion) else 0.0 for completion in completions]
