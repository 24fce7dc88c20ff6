"""Reward 1 when the submitted answer is the serial number, exactly (spaces and case aside)."""
from __future__ import annotations

from rlyard.types import Reward, Task


def verify(answer: str, task: Task) -> Reward:
    expected = task.payload["answer"]
    correct = answer.strip().upper() == expected.upper()
    return Reward(value=float(correct), components={"correct": float(correct)}, info={"submitted": answer, "expected": expected})
