"""arith: "What is 37+45?" with an exact-match verifier; the quickstart family."""
from rlyard.envs.arith.env import make_env
from rlyard.envs.arith.tasks import make_tasks
from rlyard.envs.arith.verify import extract_answer, verify
from rlyard.environment import Family

FAMILY = Family(
    name="arith",
    make_tasks=make_tasks,
    make_env=make_env,
    verify=verify,
    description="Two-operand integer arithmetic (+, -, *); reward 1 when the last number in the reply is right.",
)

__all__ = ["FAMILY", "extract_answer", "make_env", "make_tasks", "verify"]
