"""The dataset family has no grader of its own: `env.reward` names it (rlyard/rewards)."""
from __future__ import annotations

from rlyard.types import Reward, Task

NEEDS_REWARD = ("env.name=dataset grades replies with Python reward functions: set env.reward, e.g. "
                "env.reward=rlyard.rewards:math_equal or env.reward=path/to/rewards.py:my_reward (docs/your-data.md)")


def verify(reply: str, task: Task) -> Reward:
    """Reached only without env.reward: the run refuses to start before that (rlyard.config)."""
    raise RuntimeError(NEEDS_REWARD)
