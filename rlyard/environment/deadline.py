"""A deadline on grading: a `score()` that has not answered in time fails its episode as infra.

A grader that hangs (a judge that never replies, a test that deadlocks outside the sandbox's
limits) would otherwise block a sync step for good, or an async worker. The grader runs in a
thread of its own, and a late one is stopped, not left running: `GraderCancelled` is raised in
that thread (CPython's PyThreadState_SetAsyncExc), which takes effect at its next Python
bytecode, so a grader looping in Python stops at once. One blocked inside a C call (a wait on a
sandboxed process, a socket read) stops when that call returns: the caller closes the episode's
environment right after the timeout, which kills its sandbox and so ends the wait. Its answer
is dropped either way; the episode fails alone, as infra. (Graders hold sandboxes, browsers and
open files of the environment, so they cannot be moved to a process of their own.)
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable

from rlyard.errors import PlatformError


class GraderTimeout(PlatformError):
    """The grader did not answer within env.grader_timeout_s: an infra failure, never a 0."""


class GraderCancelled(BaseException):
    """Raised inside a late grader's thread to stop it (a BaseException: a grader's own
    `except Exception` does not swallow it)."""


def cancel(thread: threading.Thread) -> bool:
    """Raise GraderCancelled in `thread` at its next Python bytecode; False if it had ended."""
    if thread.ident is None or not thread.is_alive():
        return False
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(GraderCancelled)) == 1


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

    thread = threading.Thread(target=run, daemon=True, name="rlyard-grader")
    thread.start()
    if not finished.wait(seconds):
        cancel(thread)
        raise GraderTimeout(f"{what} did not answer within {seconds:g} s (env.grader_timeout_s); stopped")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
