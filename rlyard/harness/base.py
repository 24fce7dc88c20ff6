"""The harness contract: what rlyard gives a third-party agent harness, and what it gets back.

A harness (mini-swe-agent, smolagents, your own) plays one episode by itself. It never sees the
engine, the tokenizer or the grader; it gets three things, the same three the production recipe
gives its harnesses:

- a base URL: the episode's own session on rlyard's OpenAI-compatible gateway, which records
  every token the policy samples (so the episode trains without the harness knowing it);
- a workspace: the task's repository on the host, for reading only (logs, listings);
- a sandbox exec function: the one way to act on the workspace. Model-written commands run
  inside the episode's rlyard sandbox (no network, no host files, hidden tests absent), never
  in the harness's own process.

Harnesses are looked up by name: built-in ones are imported only when an arm uses them (their
packages are optional), `register_harness` adds one in-process, and `module:attribute` names
any importable harness without registering it.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol


class ExecResult(NamedTuple):
    output: str  # stdout then stderr, decoded, as a shell would show them
    exit_code: int  # the command's exit status (-9 when the sandbox killed it)
    timed_out: bool = False  # the sandbox's wall-time limit (or the timeout asked for) was reached


class ExecFn(Protocol):
    def __call__(self, command: str, timeout_s: float | None = None) -> ExecResult: ...


@dataclass(frozen=True)
class HarnessEpisode:
    """One episode as a harness receives it."""

    base_url: str  # http://HOST:PORT/sessions/<id>/v1: point the harness's OpenAI client here
    model: str  # the model name the gateway answers to
    workspace: Path  # the repository on the host; read-only for the harness, commands go through `exec`
    exec: ExecFn  # runs a shell command in the episode's sandbox, with the workspace as its cwd
    task: str  # the task text (for code: the issue and the repository's file list)
    max_turns: int  # model calls the harness may make (agent.max_turns)
    max_tokens: int  # tokens per reply to ask for (agent.max_tokens_per_turn)
    temperature: float  # ask for the run's sampling settings: the learner's logprobs assume them
    top_p: float = 1.0
    seed: int | None = None  # distinct per episode, so a group's samples differ


@dataclass(frozen=True)
class HarnessOutcome:
    """How the harness says its episode ended; the reward comes from the grader, not from here."""

    finish_reason: str  # the harness's own word: "submitted", "turn_limit", "format_errors" ...
    submission: str | None = None  # what it submitted, when it did


class Harness(Protocol):
    """Plays `episode` to its end. Raising means the harness broke (an infra failure that leaves
    the group); an agent that gives up or hits its limits returns normally."""

    def __call__(self, episode: HarnessEpisode) -> HarnessOutcome: ...


BUILTIN = {"mini_swe_agent": "rlyard.harness.mini_swe_agent:MiniSweAgent"}
_REGISTERED: dict[str, Callable[[], Harness]] = {}


def register_harness(name: str, factory: Callable[[], Harness]) -> None:
    """Make `name` usable as a harness arm in this process (`factory()` builds one harness)."""
    _REGISTERED[name] = factory


def is_harness(name: str) -> bool:
    """Whether an arm of that name is played by a harness (rather than by rlyard's agent loop)."""
    return name in _REGISTERED or name in BUILTIN or ":" in name


def harness_names() -> list[str]:
    return sorted({*BUILTIN, *_REGISTERED})


def get_harness(name: str) -> Harness:
    """A fresh harness for one episode; a clear error naming the package when it is not installed."""
    if name in _REGISTERED:
        return _REGISTERED[name]()
    target = BUILTIN.get(name, name)
    if ":" not in target:
        raise ValueError(f"unknown harness {name!r}; known: {harness_names()} (or module:attribute)")
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        hint = " (pip install 'rlyard[harness]')" if name in BUILTIN else ""
        raise ImportError(f"harness {name!r} cannot be imported: {e}{hint}") from e
    try:
        factory = getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"harness {name!r}: module {module_name} has no attribute {attribute!r}") from None
    return factory() if isinstance(factory, type) else factory
