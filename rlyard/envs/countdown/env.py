"""The countdown environment: one puzzle, one reply, graded by `verify`."""
from __future__ import annotations

from rlyard.environment import SingleTurnEnv
from rlyard.envs.countdown.verify import verify


def make_env() -> SingleTurnEnv:
    return SingleTurnEnv(verify)
