"""cyber: reproduce a memory-safety bug in a C program; a sanitizer report graded against the expected crash."""
from rlyard.environment import Family
from rlyard.envs.cyber.env import CyberEnv, make_env
from rlyard.envs.cyber.oracle import oracle
from rlyard.envs.cyber.tasks import make_tasks
from rlyard.envs.cyber.validate import validate

FAMILY = Family(
    name="cyber", make_tasks=make_tasks, make_env=make_env, verify=None, multi_turn=True, validate=validate, oracle=oracle,
    description="Multi-turn: write a proof-of-concept input that crashes a C program with the expected sanitizer report.",
)

__all__ = ["FAMILY", "CyberEnv", "make_env", "make_tasks"]
