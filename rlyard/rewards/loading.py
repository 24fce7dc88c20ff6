"""Reward functions named in a config: `pkg.module:fn` (importable) or `path/to/file.py:fn`.

A function keeps TRL's signature, `fn(prompts, completions, **columns) -> list[float | None]`,
so a TRL reward function runs unchanged. What a function accepts is read once from its
signature: one without `**kwargs` gets only the arguments it names, so a plain
`def exact_match(completions, answer)` works too, and one that names an argument the data does
not have is refused before the run starts (`check_arguments`), not on every sample.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

# What the scorer passes besides the data's columns (TRL's names).
PASSED = ("prompts", "completions", "completion_ids", "log_extra", "log_metric")


class RewardLoadError(ValueError):
    """A reward function that cannot be used; the message names the spec and why."""


@dataclass(frozen=True)
class RewardFunction:
    name: str  # its component name in metrics and trajectories, e.g. "exact_match"
    fn: Callable[..., Any]
    weight: float
    spec: str  # as written in env.reward
    accepts_any: bool  # has **kwargs: gets every column
    accepted: frozenset[str]  # keyword names it declares
    required: frozenset[str]  # declared without a default
    is_async: bool


def load_reward_function(spec: str) -> Callable[..., Any]:
    """The callable a spec names; a file path is resolved against the working directory."""
    if not isinstance(spec, str) or ":" not in spec:
        raise RewardLoadError(f"env.reward {spec!r}: expected 'package.module:function' or 'path/to/file.py:function'")
    source, _, attribute = spec.rpartition(":")
    if not source or not attribute:
        raise RewardLoadError(f"env.reward {spec!r}: expected 'package.module:function' or 'path/to/file.py:function'")
    module = _import_file(spec, Path(source)) if source.endswith(".py") or os.sep in source else _import_module(spec, source)
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            public = sorted(name for name, value in vars(module).items() if callable(value) and not name.startswith("_"))
            raise RewardLoadError(f"env.reward {spec!r}: {source} has no attribute {attribute!r}; "
                                  f"its functions: {', '.join(public) or 'none'}")
        found = getattr(found, part)
    if not callable(found):
        raise RewardLoadError(f"env.reward {spec!r}: {attribute} is a {type(found).__name__}, not a function")
    return found


def _import_module(spec: str, name: str):
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # like `python -m`: modules of the current folder import
    try:
        return importlib.import_module(name)
    except Exception as error:  # an ImportError, or the module's own code failing on import
        raise RewardLoadError(f"env.reward {spec!r}: cannot import {name!r} ({type(error).__name__}: {error})") from None


def _import_file(spec: str, path: Path):
    path = path.expanduser().resolve()
    if not path.is_file():
        raise RewardLoadError(f"env.reward {spec!r}: no file {path} (relative paths are read from {Path.cwd()})")
    # one module per file content: loading the same file twice (train, then eval) reuses it
    digest = hashlib.sha256(str(path).encode() + path.read_bytes()).hexdigest()[:12]
    module_name = f"rlyard_reward_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise RewardLoadError(f"env.reward {spec!r}: {path} failed on import ({type(error).__name__}: {error})") from None
    return module


def describe(fn: Callable[..., Any], spec: str, weight: float) -> RewardFunction:
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else getattr(fn, "__call__", fn)
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        signature = None
    if signature is None:
        accepts_any, accepted, required = True, frozenset(), frozenset()
    else:
        params = signature.parameters.values()
        accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        named = [p for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
        accepted = frozenset(p.name for p in named)
        required = frozenset(p.name for p in named if p.default is inspect.Parameter.empty)
        if not accepts_any and "completions" not in accepted and "completion_ids" not in accepted:
            raise RewardLoadError(f"env.reward {spec!r}: a reward function takes `completions` (TRL's signature "
                                  f"fn(prompts, completions, **columns)), this one takes ({', '.join(accepted)})")
    name = getattr(fn, "__name__", None) or type(fn).__name__
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))
    return RewardFunction(name, fn, float(weight), spec, accepts_any, accepted, required, is_async)


def load_rewards(reward: str | list[str] | None, weights: list[float] | None = None) -> list[RewardFunction]:
    """env.reward / env.reward_weights as functions; two with the same name get `name_2` ..."""
    specs = [reward] if isinstance(reward, str) else list(reward or [])
    weights = list(weights) if weights is not None else [1.0] * len(specs)
    if len(weights) != len(specs):
        raise RewardLoadError(f"env.reward_weights: one weight per env.reward function ({len(specs)}), got {len(weights)}")
    functions, seen = [], {}
    for spec, weight in zip(specs, weights):
        function = describe(load_reward_function(spec), spec, weight)
        seen[function.name] = seen.get(function.name, 0) + 1
        if seen[function.name] > 1:
            function = replace(function, name=f"{function.name}_{seen[function.name]}")
        functions.append(function)
    return functions


def check_arguments(functions: list[RewardFunction], columns: set[str], where: str) -> None:
    """Refuse a function that requires an argument nobody will pass (a column the data lacks)."""
    available = set(PASSED) | columns
    for function in functions:
        missing = sorted(function.required - available)
        if missing:
            raise RewardLoadError(f"env.reward {function.spec!r}: {function.name} requires {', '.join(missing)}, "
                                  f"which {where} does not have (columns: {', '.join(sorted(columns)) or 'none'})")
