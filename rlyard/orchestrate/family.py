"""The run's family with its `env.reward` functions, built without torch.

A Ray grader actor hosts only environments and verifiers: importing `orchestrate/setup.py` (the
model, the engine, the learner) there cost each grader start about 4 s of CPU and torch's
memory, on nodes that never run a model.
"""
from __future__ import annotations

from rlyard.config import ConfigError, RunConfig
from rlyard.envs import Family, get_family
from rlyard.rewards import RewardLoadError, check_arguments, load_rewards, with_rewards
from rlyard.types import Task


def run_family(config: RunConfig) -> Family:
    """`env.name`'s family, graded by the `env.reward` functions when the config names some."""
    family = get_family(config.env.name)
    if config.env.reward is None:
        return family
    return with_rewards(family, load_rewards(config.env.reward, config.env.reward_weights))


def check_reward_arguments(config: RunConfig, tasks: list[Task]) -> None:
    """A reward function that requires a column no task has is refused before the first rollout."""
    if config.env.reward is None or not tasks:
        return
    columns = {key for task in tasks[:1000] for key in task.payload}
    try:
        check_arguments(load_rewards(config.env.reward, config.env.reward_weights), columns, f"env.name={config.env.name}'s data")
    except RewardLoadError as error:
        raise ConfigError(str(error)) from None
