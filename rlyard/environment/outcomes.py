"""The line between the policy's failures (a 0) and the platform's (infra), drawn in one place.

Whatever the policy produced (tool arguments, files, answers, PoCs, reports) must never make a
tool or a grader raise: an episode that raised leaves its group as infra, so an output that
crashes the grader would never be penalised and RL would learn to produce it. Only the
platform's own faults (a sandbox that cannot start, a judge endpoint down, a compiler missing,
a grader past its deadline) are infra.

The rule (`policy_reason`), applied by `ToolEnv` to every tool call and every `score` of its
subclasses, by `SingleTurnEnv.score`, and by the single-turn rollout to any environment:

0. a `PolicyInputError`, raised by code that checked the policy's input and refuses it, is the
   policy's (whatever it was raised while handling);
1. an exception that is, or was raised from, a platform fault (`PlatformError`, the sandbox's
   `SandboxError`, `GraderTimeout`, `JudgeUnavailable`, an `OSError` other than a path too long,
   not encodable or looping) is infra;
2. an exception of the kinds that only data provokes - text that is not UTF-8 or cannot be encoded
   (`UnicodeError`), values nested past the interpreter's depth (`RecursionError`), a NUL byte
   in a path or an argument, an integer too long to convert, JSON that does not parse - is the
   policy's: a tool answers `error: ...`, a grader scores 0 with the reason in
   `info["reason"]` ("policy_input: ...") and the component `policy_input` = 1 (each step's
   `rollout/policy_input_errors` counts them);
3. anything else (a `KeyError`, `TypeError`, `AttributeError`... from the grader's own code) is
   infra: it may be a real bug of the platform, and a bug must show, never score 0 in silence.
   A grader that must take a wrong-typed value from the policy checks it and raises
   `PolicyInputError` (or returns 0 itself).
"""
from __future__ import annotations

import errno
import functools
import json
import traceback
from typing import Any, Callable

from rlyard.errors import PlatformError, PolicyInputError
from rlyard.types import Reward

REASON_PREFIX = "policy_input: "


# the platform's faults: PlatformError and its kinds (SandboxError, GraderTimeout, JudgeUnavailable), and the OS's
PLATFORM_TYPES: tuple[type[BaseException], ...] = (PlatformError, OSError)


def _chain(error: BaseException) -> list[BaseException]:
    """The error and those it was raised from or while handling (cycles cut)."""
    seen: list[BaseException] = []
    while error is not None and all(error is not e for e in seen):
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


# errors of a path the policy chose: too long, not encodable, a loop of links it made
_PATH_ERRNOS = (errno.ENAMETOOLONG, errno.EILSEQ, errno.ELOOP)


def _data_reason(error: BaseException) -> str | None:
    if isinstance(error, OSError) and error.errno in _PATH_ERRNOS:
        return f"a path that cannot be opened ({error})"
    if isinstance(error, PolicyInputError):
        return str(error)
    if isinstance(error, UnicodeError):
        return f"text that is not valid UTF-8 or cannot be encoded ({type(error).__name__}: {error})"
    if isinstance(error, RecursionError):
        return "a value nested too deeply to read"
    if isinstance(error, json.JSONDecodeError):
        return f"JSON that does not parse ({error})"
    message = str(error)
    if isinstance(error, ValueError) and ("null byte" in message or "null character" in message):
        return f"a NUL byte where none can be ({message})"
    if isinstance(error, ValueError) and "integer string conversion" in message:
        return f"a number too long to read ({message})"
    if isinstance(error, OverflowError):
        return f"a number out of range ({message})"
    return None


def policy_reason(error: BaseException) -> str | None:
    """Why `error` is the policy's failure (a reason to show or record), or None: the platform's (infra)."""
    if isinstance(error, PolicyInputError):  # said by the code that checked the input: it knows
        return str(error)
    chain = _chain(error)
    if any(isinstance(e, PLATFORM_TYPES) and _data_reason(e) is None for e in chain):
        return None
    return _data_reason(error)


def policy_verdict(error: BaseException) -> Reward | None:
    """Reward 0 with the reason when `error` is the policy's failure; None when it is infra."""
    reason = policy_reason(error)
    if reason is None:
        return None
    return Reward(0.0, {"policy_input": 1.0}, {"reason": REASON_PREFIX + reason,
                                                "error": "".join(traceback.format_exception(error, limit=-3))[-4000:]})


def policy_line(score: Callable[..., Reward]) -> Callable[..., Reward]:
    """`score` that turns the policy's failures into 0 with the reason and lets the platform's raise."""
    if getattr(score, "__policy_line__", False):
        return score

    @functools.wraps(score)
    def guarded(*args: Any, **kwargs: Any) -> Reward:
        try:
            return score(*args, **kwargs)
        except Exception as error:
            verdict = policy_verdict(error)
            if verdict is None:
                raise
            return verdict

    guarded.__policy_line__ = True  # type: ignore[attr-defined]
    return guarded


def tool_error(error: BaseException) -> str | None:
    """The tool's answer to the policy when `error` is the policy's failure; None when it is infra."""
    reason = policy_reason(error)
    return None if reason is None else f"error: {reason}"
