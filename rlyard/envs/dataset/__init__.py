"""dataset: your own prompts from a file, graded by the Python reward functions of `env.reward`."""
from rlyard.environment import Family
from rlyard.envs.dataset.env import make_env
from rlyard.envs.dataset.readers import DatasetError, read_rows
from rlyard.envs.dataset.tasks import make_tasks

FAMILY = Family(
    name="dataset",
    make_tasks=make_tasks,
    make_env=make_env,
    verify=None,
    description="Prompts from your JSONL / parquet / CSV / datasets folder (env.options.path), graded by env.reward.",
)

__all__ = ["FAMILY", "DatasetError", "make_env", "make_tasks", "read_rows"]
