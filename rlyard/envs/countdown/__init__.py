"""countdown: reach a target from given numbers with + - * /; graded by a safe `ast` evaluator."""
from rlyard.environment import Family
from rlyard.envs.countdown.env import make_env
from rlyard.envs.countdown.tasks import make_tasks
from rlyard.envs.countdown.verify import evaluate, extract_expression, verify

FAMILY = Family(
    name="countdown",
    make_tasks=make_tasks,
    make_env=make_env,
    verify=verify,
    description="Countdown numbers game: reach the target with + - * / using each given number at most once.",
)

__all__ = ["FAMILY", "evaluate", "extract_expression", "make_env", "make_tasks", "verify"]
