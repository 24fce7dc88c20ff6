"""What every generated task set shares: a stable train / eval split and checked options.

A problem's split is a pure function of its family and canonical text (a stable hash, about
10% eval), so no seed, `n` or option can ever leak an eval problem into training.
"""
from __future__ import annotations

import hashlib
from typing import Any

import yaml

from rlyard.errors import ConfigError

SPLITS = ("train", "eval")
EVAL_PERCENT = 10


def split_of(family: str, canonical: str, eval_percent: int = EVAL_PERCENT) -> str:
    """The split a problem lives in; stable across runs, machines and Python versions.
    `eval_percent`: families with an `eval_percent` option (code, cyber) pass theirs."""
    digest = hashlib.sha256(f"rlyard/{family}/{canonical}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") % 100 < eval_percent else "train"


def merge_options(family: str, split: str, n: int, options: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """Options over the defaults; raise naming the allowed values on an unknown split or option."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {list(SPLITS)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ConfigError(f"env.options: unknown {family} option(s) {unknown}; allowed: {sorted(defaults)}")
    return {**defaults, **options}


def parse_option_pairs(pairs: list[str], flag: str = "--option") -> dict[str, Any]:
    """KEY=VALUE family options (`rlyard envs -o`, `rlyard collect -o`), each value read as YAML (hops=2 -> 2)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} takes KEY=VALUE, got {pair!r}")
        options[key] = yaml.safe_load(value)
    return options
