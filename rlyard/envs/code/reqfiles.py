"""Which of a repository's requirement files a row's venv reads, and whether their pins agree.

Real projects keep several pinned files side by side: one per Python version
(`requirements-py38.txt`, `requirements/py311.txt`), one per tool (docs, lint, typing, a
minimum-versions run), a `dev` file that includes all of them. Merging every file into one
install gives conflicting pins and a row that cannot load. SWE-bench reads the row's own spec,
else one of `requirements.txt` / `requirements-dev.txt` / `requirements-test.txt`; rlyard does
the same in spirit: it keeps the files a test run needs that fit the sandbox's interpreter, and
refuses (never merges silently) two pins of one package that cannot both hold.

Also here: `setup.py` values read without running it, where `install_requires` names a
module-level variable (`install_requires=REQUIRES`, `extras_require=EXTRAS`).
"""
from __future__ import annotations

import ast
import re
from typing import Any

# a file whose name carries one of these words serves a tool, not the tests
TOOL_WORDS = {"doc", "docs", "lint", "linting", "mypy", "typing", "types", "typecheck", "flake8", "pylint", "style",
              "format", "black", "isort", "precommit", "pre-commit", "bench", "benchmark", "benchmarks", "release",
              "publish", "deploy", "build", "min", "minimum", "oldest", "lowest", "upstream", "nightly", "security",
              "coverage", "ci", "tox", "pip", "pip-tools", "constraints", "examples", "notebooks", "gui", "typechecks",
              "packaging", "dist", "wheel", "profile", "profiling", "perf", "sphinx", "rtd", "readthedocs"}
TEST_WORDS = {"test", "tests", "testing"}
DEV_WORDS = {"dev", "develop", "development"}
TEST_FOLDERS = ("tests", "test", "testing")
_GLUED_VERSION = re.compile(r"(?:^|[/_\-.])[a-z]+([23])(\d{1,2})(?=$|[/_\-.])")  # tests37, py311
_VERSION = re.compile(r"(?:^|[/_\-.])(?:py|python|cp)?([23])(?:\.?(\d{1,2}))?(?=$|[/_\-.])")


def words_of(path: str) -> list[str]:
    """`requirements/tests-py311.txt` -> ['requirements', 'tests', 'py311'] (folder and stem)."""
    stem = re.sub(r"\.(txt|in)$", "", path)
    return [w for w in re.split(r"[/_.\-]+", stem.lower()) if w]


def python_of(path: str) -> tuple[int, int | None] | None:
    """The Python version a file is for, when its name says one: py38, py3.11, 311, python3.9
    give (3, minor); py2 / py3 alone give (major, None)."""
    stem = re.sub(r"\.(txt|in)$", "", path.lower())
    match = _VERSION.search(stem) or _GLUED_VERSION.search(stem)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)) if match.group(2) else None


def is_requirement_file(path: str) -> bool:
    """A root `requirements*.txt` / `*-requirements.txt`, a file of `requirements/`, or a
    requirements file of the test folder (`tests/requirements.txt`)."""
    parts = path.split("/")
    name = parts[-1]
    if not name.endswith(".txt"):
        return False
    if len(parts) == 1:
        return name.startswith("requirements") or name.endswith("requirements.txt")
    if len(parts) == 2 and parts[0] == "requirements":
        return True
    return len(parts) == 2 and parts[0] in TEST_FOLDERS and "requirements" in name


def choose_files(listing: list[str], python: tuple[int, int]) -> list[str]:
    """The requirement files of `listing` a test run on `python` needs, in reading order.

    Dropped: files of a tool (docs, lint, typing, min-versions, ...), files for another Python
    version, and a `dev` file where a test file sits in the same folder (dev files usually pull
    in every tool's file). Kept: the plain ones (requirements.txt, requirements/base.txt), the
    test and dev ones, and those for this interpreter.
    """
    candidates = [p for p in listing if is_requirement_file(p)]
    kept = []
    for path in candidates:
        words = words_of(path)
        tagged = set(words) - {"requirements", "requirement", "reqs", "txt"}
        if tagged & TOOL_WORDS:
            continue
        version = python_of(path)
        if version is not None and (version[0] != python[0] or version[1] not in (None, python[1])):
            continue
        kept.append(path)
    folder = {p: p.rpartition("/")[0] for p in kept}
    tested = {folder[p] for p in kept if set(words_of(p)) & TEST_WORDS or folder[p] in TEST_FOLDERS}
    kept = [p for p in kept if not (set(words_of(p)) & DEV_WORDS and folder[p] in tested and not set(words_of(p)) & TEST_WORDS)]
    return sorted(kept)


def check_pins(pairs: list[tuple[str, str]], python_full: str) -> None:
    """Raise ValueError when two requirements of one package cannot both hold (two different
    `==` pins, or a pin outside another's range), naming both and where each came from.
    Requirements whose marker is false for the sandbox's Python are not counted."""
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    major, minor = python_full.split(".")[:2]
    env = {**default_environment(), "python_version": f"{major}.{minor}", "python_full_version": python_full,
           "implementation_version": python_full}
    by_name: dict[str, list[tuple[Any, str, str]]] = {}
    for text, where in pairs:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue  # pip reports it with its own words
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        by_name.setdefault(canonicalize_name(req.name), []).append((req, text, where))
    for name, entries in by_name.items():
        pins = [(spec.version, text, where) for req, text, where in entries for spec in req.specifier
                if spec.operator in ("==", "===") and "*" not in spec.version]
        for version, text, where in pins:
            for req, other, other_where in entries:
                if other is text and other_where == where:
                    continue
                if not req.specifier.contains(version, prereleases=True):
                    raise ValueError(f"conflicting requirements for {name}: {text!r} ({where}) and {other!r} ({other_where}); "
                                     "name the files or packages this row needs with its `requirements`, `pip_packages` or "
                                     "`install` field")


# ---------------------------------------------------------------- setup.py, read with ast


def setup_py_values(text: str) -> dict[str, Any]:
    """The literal values of a setup() call's keywords, following module-level variables
    (`REQUIRES = [...]`, `EXTRAS = {"tests": TESTS}`, `A + B`); setup.py is never run."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    env: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                env[node.targets[0].id] = evaluate(node.value, env)
            except ValueError:
                env.pop(node.targets[0].id, None)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]  # EXTRAS["dev"] = EXTRAS["tests"] + [...]
            try:
                env[target.value.id][evaluate(target.slice, env)] = evaluate(node.value, env)
            except (ValueError, AttributeError, KeyError, TypeError):
                pass
    out: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup":
            for keyword in node.keywords:
                if keyword.arg is None:
                    continue
                try:
                    out[keyword.arg] = evaluate(keyword.value, env)
                except ValueError:
                    continue
    return out


def evaluate(node: ast.AST, env: dict[str, Any]) -> Any:
    """A literal, a known variable, or `+` / list / tuple / dict of those; else ValueError."""
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise ValueError(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return evaluate(node.left, env) + evaluate(node.right, env)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [evaluate(e, env) for e in node.elts]
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {evaluate(k, env): evaluate(v, env) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in env:
        try:
            return env[node.value.id][evaluate(node.slice, env)]
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError("subscript") from e
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        raise ValueError("not a literal") from e
