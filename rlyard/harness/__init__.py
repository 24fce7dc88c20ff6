"""Third-party agent harnesses as arms: the contract (`base`), the gateway, the runner, one module per harness."""
from rlyard.harness.base import (
    ExecFn,
    ExecResult,
    Harness,
    HarnessEpisode,
    HarnessOutcome,
    get_harness,
    harness_names,
    is_harness,
    register_harness,
)

__all__ = ["ExecFn", "ExecResult", "Harness", "HarnessEpisode", "HarnessOutcome", "get_harness", "harness_names",
           "is_harness", "register_harness"]
