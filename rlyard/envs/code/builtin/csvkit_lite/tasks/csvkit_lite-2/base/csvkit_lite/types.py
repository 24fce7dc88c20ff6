"""Column type inference and value conversion."""

from __future__ import annotations

import re
from typing import Any, Iterable

_INT = re.compile(r"^\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
_BOOLS = {"true": True, "false": False, "yes": True, "no": False}
NULLS = frozenset({"", "na", "n/a", "null", "none"})

TYPES = ("int", "float", "bool", "str")


def is_null(value: str) -> bool:
    """True for empty strings and the usual missing-value markers (NA, null, ...)."""
    return value.strip().lower() in NULLS


def _fits(value: str, typ: str) -> bool:
    v = value.strip()
    if typ == "int":
        return bool(_INT.match(v))
    if typ == "float":
        return bool(_FLOAT.match(v))
    if typ == "bool":
        return v.lower() in _BOOLS
    return True


def infer_type(values: Iterable[str]) -> str:
    """The narrowest of "int", "float", "bool", "str" that fits every non-null value.

    A column with no non-null values is "str".
    """
    present = [v for v in values if not is_null(v)]
    if not present:
        return "str"
    for typ in ("int", "float", "bool"):
        if all(_fits(v, typ) for v in present):
            return typ
    return "str"


def convert(value: str, typ: str) -> Any:
    """Convert one field to ``typ``; nulls become None except in "str" columns."""
    if typ == "str":
        return value
    if is_null(value):
        return None
    v = value.strip()
    if typ == "int":
        return int(v)
    if typ == "float":
        return float(v)
    if typ == "bool":
        return _BOOLS[v.lower()]
    raise ValueError(f"unknown type {typ!r}")
