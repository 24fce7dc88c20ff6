"""The errors several layers raise or tell apart, in a module that imports nothing of rlyard.

They live here, not beside the code that raises them most, so that low layers (the families,
the engines, the sandbox) can raise them without importing the layers above: `ConfigError`
without `rlyard.config` (which asks the family registry), and `PlatformError` without the
environment contract (`rlyard.environment.outcomes`, which tells the policy's failures from
the platform's). `rlyard.config` re-exports `ConfigError`, and `rlyard.envs` the two others.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """A config problem, worded for the person who wrote the config."""


class PlatformError(RuntimeError):
    """A fault of the platform (never of the policy's output): the episode is infra, never a 0.

    The sandbox's `SandboxError`, the grader deadline's `GraderTimeout` and the judge's
    `JudgeUnavailable` are kinds of it, so `rlyard.environment.outcomes` knows them all by this
    one class."""


class PolicyInputError(ValueError):
    """The policy's input cannot be taken (its message says why): a tool error, or a grade of 0."""
