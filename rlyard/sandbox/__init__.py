"""Isolated, resource-limited execution of model-written commands (see docs/sandbox.md)."""
from rlyard.sandbox.sandbox import (
    Limits,
    Result,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
)

__all__ = ["Limits", "Result", "Sandbox", "SandboxError", "SandboxUnavailable"]
