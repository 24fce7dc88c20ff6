"""The arith environment: one question, one reply, graded by `verify`."""
from __future__ import annotations

from rlyard.envs.arith.verify import verify
from rlyard.environment import SingleTurnEnv


def make_env() -> SingleTurnEnv:
    return SingleTurnEnv(verify)
