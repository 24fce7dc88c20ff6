"""Environment families: one folder each, every folder the same shape (tasks, env, verify).

`get_family(name)` is the one door (see `rlyard.envs.registry`): built-in families, families of
installed packages (entry-point group `rlyard.envs`) and `module:attribute` of your own.
"""
from rlyard.envs.base import Environment, Family, SingleTurnEnv, StepResult
from rlyard.envs.registry import ENTRY_POINT_GROUP, FamilyNotFound, family_names, get_family, register

__all__ = ["ENTRY_POINT_GROUP", "Environment", "Family", "FamilyNotFound", "SingleTurnEnv", "StepResult", "family_names",
           "get_family", "register"]
