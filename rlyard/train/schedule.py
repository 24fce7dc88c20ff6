"""Learning-rate schedules: one pure function of the optimizer step, shared by `rlyard sft` and the RL learner.

Being a function of the step alone (no scheduler object with state of its own) is what makes
resume exact: a run restarted from the checkpoint of step k computes the same rate for step k
as the run that never stopped, whatever the optimizer's saved param groups say.
"""
from __future__ import annotations

import math

SCHEDULES = ("constant", "linear", "cosine")


def lr_at(step: int, total: int, lr: float, schedule: str = "constant", warmup_steps: int = 0) -> float:
    """The learning rate of optimizer step `step` (0-based) of `total`.

    Warmup is linear from lr / warmup_steps (step 0) to lr (step warmup_steps - 1), so the first
    step already learns, unlike a warmup from 0. Then `constant` stays at lr, while `linear` and
    `cosine` decay from lr at step warmup_steps to 0 at step `total`, the step after the last.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown lr schedule {schedule!r}; allowed: {', '.join(SCHEDULES)}")
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    progress = min(1.0, (step - warmup_steps) / max(1, total - warmup_steps))
    if schedule == "linear":
        return lr * (1.0 - progress)
    return lr * 0.5 * (1.0 + math.cos(math.pi * progress))
