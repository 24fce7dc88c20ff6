"""One door to every environment family: built-in, installed by a package, or a module of yours.

`get_family(name)` looks in this order:

1. families registered in this process with `register` (tests, notebooks);
2. the built-in families, listed once in `BUILTIN`;
3. the `rlyard.envs` entry-point group: an installed package declares
   `[project.entry-points."rlyard.envs"] echo = "my_pkg.echo:FAMILY"`;
4. a name with a colon, `my_pkg.my_module:family`: that attribute of a module importable from
   the current folder or `PYTHONPATH` (the current folder is put on `sys.path` for it, as
   `python -m` would, since the `rlyard` console script does not).

The object found is a `Family`, or a callable without arguments that returns one. Families are
imported by name (importlib), so this module imports none of them and no family imports it.
"""
from __future__ import annotations

import importlib
import os
import sys
from importlib.metadata import entry_points
from typing import Any

from rlyard.environment import Family

ENTRY_POINT_GROUP = "rlyard.envs"
BUILTIN = {
    "arith": "rlyard.envs.arith:FAMILY",
    "code": "rlyard.envs.code:FAMILY",
    "countdown": "rlyard.envs.countdown:FAMILY",
    "cyber": "rlyard.envs.cyber:FAMILY",
    "dataset": "rlyard.envs.dataset:FAMILY",
    "files": "rlyard.envs.files:FAMILY",
    "general": "rlyard.envs.general:FAMILY",
    "music": "rlyard.envs.music:FAMILY",
    "webdev": "rlyard.envs.webdev:FAMILY",
}

_registered: dict[str, Family] = {}
_loaded: dict[str, Family] = {}


class FamilyNotFound(KeyError):
    """An env.name no door knows, or whose object could not be loaded; the message says which."""

    def __str__(self) -> str:
        return str(self.args[0])


def register(family: Family) -> Family:
    """Make a family known to this process under `family.name` (it shadows a built-in of that name)."""
    if not isinstance(family, Family):
        raise TypeError(f"register() takes a rlyard.envs.Family, got {type(family).__name__}")
    _registered[family.name] = family
    _loaded.pop(family.name, None)
    return family


def installed_families() -> dict[str, str]:
    """{name: "module:attribute"} of the `rlyard.envs` entry points of installed packages."""
    return {point.name: point.value for point in entry_points(group=ENTRY_POINT_GROUP)}


def family_names() -> list[str]:
    """Every family name known without importing one: registered, built-in and installed."""
    return sorted({*_registered, *BUILTIN, *installed_families()})


def get_family(name: str) -> Family:
    if name in _registered:
        return _registered[name]
    if name not in _loaded:
        spec = BUILTIN.get(name) or installed_families().get(name)
        if spec is None and ":" in name:
            spec = name
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.append(os.getcwd())
        if spec is None:
            raise FamilyNotFound(f"unknown environment {name!r}; known: {', '.join(family_names())} "
                                 "(or give module:attribute of your own family)")
        _loaded[name] = load_family(spec, name)
    return _loaded[name]


def load_family(spec: str, name: str) -> Family:
    """Import `module:attribute` and return its Family; errors name the spec and what went wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise FamilyNotFound(f"environment {name!r}: {spec!r} is not module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise FamilyNotFound(f"environment {name!r}: cannot import {module_name!r} ({error})") from error
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise FamilyNotFound(f"environment {name!r}: module {module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    if not isinstance(found, Family) and callable(found):
        found = found()
    if not isinstance(found, Family):
        raise FamilyNotFound(f"environment {name!r}: {spec} is a {type(found).__name__}, not a rlyard.envs.Family "
                             "(or a function returning one)")
    return found
