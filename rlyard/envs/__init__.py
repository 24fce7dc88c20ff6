"""Environment families: one folder each, every folder the same shape (tasks, env, verify).

`get_family(name)` is the one door (see `rlyard.envs.registry`): built-in families, families of
installed packages (entry-point group `rlyard.envs`) and `module:attribute` of your own. The
contract a family keeps lives in `rlyard.environment`; its names are re-exported here, with the
two errors a grader raises to say whose failure it is, for a family written outside rlyard.
"""
from rlyard.environment import Environment, Family, SingleTurnEnv, StepResult, policy_line
from rlyard.envs.registry import ENTRY_POINT_GROUP, FamilyNotFound, family_names, get_family, register
from rlyard.errors import PlatformError, PolicyInputError

__all__ = ["ENTRY_POINT_GROUP", "Environment", "Family", "FamilyNotFound", "PlatformError", "PolicyInputError",
           "SingleTurnEnv", "StepResult", "family_names", "get_family", "policy_line", "register"]
