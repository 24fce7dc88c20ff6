"""files: find a fact in a generated file tree with shell tools (the small multi-turn family)."""
from rlyard.environment import Family
from rlyard.envs.files.env import FilesEnv, make_env
from rlyard.envs.files.oracle import oracle
from rlyard.envs.files.tasks import make_tasks
from rlyard.envs.files.verify import verify

FAMILY = Family(
    name="files", make_tasks=make_tasks, make_env=make_env, verify=verify, multi_turn=True, oracle=oracle,
    description="Multi-turn: search a generated file tree with bash / grep / read_file and submit a serial number.",
)

__all__ = ["FAMILY", "FilesEnv", "make_env", "make_tasks", "verify"]
