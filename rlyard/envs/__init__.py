"""Environment families: one folder each, every folder the same shape (tasks, env, verify)."""
from rlyard.envs.base import Environment, Family, SingleTurnEnv, StepResult, family_names, get_family, register

__all__ = ["Environment", "Family", "SingleTurnEnv", "StepResult", "family_names", "get_family", "register"]
