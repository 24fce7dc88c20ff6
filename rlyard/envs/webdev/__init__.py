"""webdev: build a web page with file tools; rendered in headless Chromium, gated on runtime
errors, scored by DOM checks and similarity to a reference (and, optionally, a vision judge)."""
from rlyard.environment import Family
from rlyard.envs.webdev.env import WebdevEnv, make_env
from rlyard.envs.webdev.judge import score_group
from rlyard.envs.webdev.oracle import oracle
from rlyard.envs.webdev.tasks import make_tasks
from rlyard.envs.webdev.validate import validate

FAMILY = Family(
    name="webdev", make_tasks=make_tasks, make_env=make_env, verify=None, multi_turn=True, validate=validate,
    oracle=oracle, score_group=score_group,
    description="Multi-turn: build a site in dist/ with file tools; graded in headless Chromium (runtime gate, "
                "DOM checks, SSIM to a reference, an optional group vision judge).",
)

__all__ = ["FAMILY", "WebdevEnv", "make_env", "make_tasks"]
