"""The dataset environment: one prompt, one reply; the grade is `env.reward`'s, given per batch."""
from __future__ import annotations

from rlyard.environment import SingleTurnEnv
from rlyard.envs.dataset.verify import verify


def make_env() -> SingleTurnEnv:
    return SingleTurnEnv(verify)
