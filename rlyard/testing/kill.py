"""SIGKILL on cue: the trainer calls `kill_point(name)` where a crash would hurt most.

With RLYARD_FAULT_KILL_AT=name:n in the environment, the n-th call of `kill_point(name)` in this
process (default n=1) kills it with SIGKILL, which no handler can catch: what the run leaves on
disk is what a power cut or the OOM killer would leave. Without the variable a call costs one
dict lookup. tests/test_kill_resume.py kills at every point and resumes.
"""
from __future__ import annotations

import os
import signal
import sys

KILL_ENV = "RLYARD_FAULT_KILL_AT"
# inside a rollout (sampled, not graded); inside the learner's update (gradients computed, not
# applied); after a step's rows are written, before its checkpoint; inside a checkpoint write
# (files in the staging folder); after the checkpoint folder is in place, before the `latest`
# pointer names it; after a whole checkpoint
KILL_POINTS = ("rollout", "update", "logged", "checkpoint", "checkpoint_pointer", "after_checkpoint")

_counts: dict[str, int] = {}


def kill_point(name: str) -> None:
    """SIGKILL this process here when RLYARD_FAULT_KILL_AT=name:n and this is the n-th time."""
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return
    point, _, nth = spec.partition(":")
    if point != name:
        return
    _counts[name] = _counts.get(name, 0) + 1
    if _counts[name] == int(nth or 1):
        print(f"[rlyard] fault injection: SIGKILL at {name} #{_counts[name]}", flush=True)
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
