"""general: knowledge work (files, SQL-backed task tools) graded by a weighted rubric of rules and an LLM judge."""
from rlyard.environment import Family
from rlyard.envs.general.env import GeneralEnv, make_env, score_group
from rlyard.envs.general.oracle import oracle
from rlyard.envs.general.tasks import make_tasks
from rlyard.envs.general.validate import validate

FAMILY = Family(
    name="general", make_tasks=make_tasks, make_env=make_env, verify=None, multi_turn=True, validate=validate,
    oracle=oracle, score_group=score_group,
    description="Multi-turn: answer from files and SQL-backed tools into answer.md; a weighted rubric (rules + LLM judge) grades it.",
)

__all__ = ["FAMILY", "GeneralEnv", "make_env", "make_tasks", "score_group"]
