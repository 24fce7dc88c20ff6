"""Isolated, resource-limited execution of model-written commands (see docs/sandbox.md)."""
from rlyard.sandbox.sandbox import (
    Limits,
    Result,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    bwrap_works,
    require_sealed,
)
from rlyard.sandbox.uids import UidPool

__all__ = ["Limits", "Result", "Sandbox", "SandboxError", "SandboxUnavailable", "UidPool",
           "bwrap_works", "require_sealed"]
