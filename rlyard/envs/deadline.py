"""A deadline on grading: a `score()` that has not answered in time fails its episode as infra.

A grader that hangs (a judge that never replies, a test that deadlocks outside the sandbox's
limits) would otherwise block a sync step for good, or an async worker. Python cannot kill a
thread, so the late grader is abandoned: it runs on in a daemon thread, its answer is dropped,
and the episode's environment is closed under it (what it was grading is gone; it fails alone).
"""
from __future__ import annotations

import threading
from typing import Any, Callable


class GraderTimeout(RuntimeError):
    """The grader did not answer within env.grader_timeout_s: an infra failure, never a 0."""


def within(seconds: float | None, fn: Callable[[], Any], what: str = "the grader") -> Any:
    """fn() if it returns (or raises) within `seconds`; GraderTimeout otherwise. None: no deadline."""
    if seconds is None:
        return fn()
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as error:  # re-raised in the caller's thread
            outcome["error"] = error
        finally:
            finished.set()

    threading.Thread(target=run, daemon=True, name="rlyard-grader").start()
    if not finished.wait(seconds):
        raise GraderTimeout(f"{what} did not answer within {seconds:g} s (env.grader_timeout_s); abandoned")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
