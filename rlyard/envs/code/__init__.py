"""code: software-engineering tasks in a repository, graded by hidden tests in the sandbox."""
from rlyard.environment import Family
from rlyard.envs.code.env import CodeEnv, make_env
from rlyard.envs.code.oracle import oracle
from rlyard.envs.code.tasks import make_tasks
from rlyard.envs.code.validate import validate
from rlyard.harness.runner import play_episodes

FAMILY = Family(
    name="code", make_tasks=make_tasks, make_env=make_env, verify=None, multi_turn=True, validate=validate, oracle=oracle,
    play=play_episodes,  # harness arms (mini_swe_agent) behind the gateway; tool arms through the agent loop
    description="Multi-turn: fix an issue in a Python repository with tools in the sandbox; hidden tests grade it.",
)

__all__ = ["FAMILY", "CodeEnv", "make_env", "make_tasks"]
