"""Baselines for lone sessions: live traffic rarely comes in groups of one prompt.

A session that is not in a GRPO group (no `n > 1`, no `metadata.group`) is trained with the
advantage A = r - b, its reward less a baseline `b` chosen by `live.baseline`:

- `rloo`: the leave-one-out mean over a window. The pool is the last `live.baseline_window`
  lone rewards before this learner step plus the step's own lone rewards; for session i,
  b_i = mean(pool without r_i). With nothing else in the pool, b_i = r_i (A = 0: nothing to
  compare with).
- `per_prompt`: a value per prompt (the prompt's tokens, hashed), moved towards each reward:
  b = V(p), then V(p) <- V(p) + alpha (r - V(p)) (`live.baseline_alpha`). A prompt seen for the
  first time starts at the mean of the rloo window (0 when it is empty), not at 0.

The state (window and values) goes into every checkpoint, so a restarted server goes on with
the same baseline.
"""
from __future__ import annotations

import hashlib
import statistics
from collections import deque
from typing import Any

from rlyard.types import Trajectory


def prompt_key(trajectory: Trajectory) -> str:
    """The prompt: the tokens before the first sampled one."""
    first = next((i for i, m in enumerate(trajectory.loss_mask) if m), len(trajectory.token_ids))
    return hashlib.sha256(repr(trajectory.token_ids[:first]).encode()).hexdigest()[:16]


class Baseline:
    def __init__(self, kind: str, window: int, alpha: float):
        if kind not in ("rloo", "per_prompt"):
            raise ValueError(f"live.baseline must be rloo or per_prompt, got {kind!r}")
        self.kind, self.alpha = kind, alpha
        self.history: deque[float] = deque(maxlen=window)
        self.values: dict[str, float] = {}

    def advantages(self, rewards: list[float], prompts: list[str]) -> list[float]:
        """One advantage per lone session of a step (in order), and the state moved on."""
        if self.kind == "rloo":
            pool = [*self.history, *rewards]
            total = sum(pool)
            out = [r - (total - r) / (len(pool) - 1) if len(pool) > 1 else 0.0 for r in rewards]
        else:
            start = statistics.fmean(self.history) if self.history else 0.0
            out = []
            for r, p in zip(rewards, prompts):
                value = self.values.get(p, start)
                out.append(r - value)
                self.values[p] = value + self.alpha * (r - value)
        self.history.extend(rewards)
        return out

    def mean(self) -> float:
        return statistics.fmean(self.history) if self.history else 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "history": list(self.history), "values": dict(self.values)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history.clear()
        self.history.extend(state.get("history", []))
        self.values = dict(state.get("values", {}))
