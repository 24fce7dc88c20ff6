"""The environment contract: what the agent loop, the rollout and the harness runner ask of an environment.

`Environment` (`reset` / `step` / `score` / `close`), `StepResult`, `SingleTurnEnv` and `Family`
(`base`); the line between the policy's failures and the platform's (`outcomes`); the deadline on
grading (`deadline`). It imports only `rlyard.types` and `rlyard.errors`, and the families
(`rlyard.envs`, which re-exports these names) sit above it with the agent between them.
"""
from rlyard.environment.base import Environment, Family, SingleTurnEnv, StepResult, Verifier
from rlyard.environment.outcomes import policy_line

__all__ = ["Environment", "Family", "SingleTurnEnv", "StepResult", "Verifier", "policy_line"]
