"""A row's own Python environment: a virtualenv per (repository, dependency spec), cached.

The tests of a task run in the sandbox, whose Python is Debian's `/usr/bin/python3` with its
pytest. A repository that needs packages gets a virtualenv made with that same interpreter
(`/usr/bin/python3 -m venv --system-site-packages --without-pip`, so Debian's pytest stays
importable), its dependencies installed by the host's pip (`pip --python VENV/bin/python
install ...`), and is cached under `$RLYARD_CACHE/code-venvs/<name>-<hash>` (default
`~/.cache/rlyard`). The repository itself is never installed: the workspace copy is what the
tests import. Nothing of the repository is executed on the host (setup.py is read with `ast`,
never run).

Where the dependencies come from, first match wins:
    the row: `install` (a `pip install ...` command), `pip_packages`, `requirements`
    (an empty list says: no package, do not read the metadata)
    the repository at the base commit: pyproject.toml ([project] dependencies and the
    test / tests / testing extras), setup.cfg (install_requires and those extras), setup.py
    (literal install_requires), requirements*.txt at the root (not docs ones)
A spec that comes out empty means no venv: the task keeps the sandbox's `python3`.
"""
from __future__ import annotations

import ast
import configparser
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Callable

from rlyard.cache import cache_dir

SANDBOX_PYTHON = "/usr/bin/python3"
TEST_EXTRAS = ("test", "tests", "testing")
MARKER = ".rlyard-venv.json"


class VenvError(ValueError):
    """A dependency spec that cannot be read, or a venv that could not be built."""


def cache_root() -> Path:
    return cache_dir() / "code-venvs"


# ---------------------------------------------------------------- dependency specs


def row_requirements(row: dict, read: Callable[[str], str | None]) -> tuple[list[str], str] | None:
    """(requirements, where) from the row's own fields, or None when it names none."""
    if row.get("install"):
        return install_command(str(row["install"]), read), "field 'install'"
    for field in ("pip_packages", "requirements"):
        value = row.get(field)
        if hasattr(value, "tolist"):  # a numpy array from parquet / pandas
            value = value.tolist()
        if value == []:  # said explicitly: this row needs no package (its metadata is not read)
            return [], f"field {field!r} (empty)"
        if value in (None, ""):
            continue
        if isinstance(value, str):
            items = value.split() if field == "pip_packages" else requirement_lines(value, read)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            items = [v.strip() for v in value if v.strip()]
        else:
            raise VenvError(f"field {field!r} must be a list of requirement strings or a string")
        return items, f"field {field!r}"
    return None


def install_command(command: str, read: Callable[[str], str | None]) -> list[str]:
    """The requirements of `pip install ...` commands (`&&`-joined); `-e .` / `.` is dropped."""
    out: list[str] = []
    for part in re.split(r"\s*&&\s*|\s*;\s*", command.strip()):
        words = shlex.split(part)
        while words and words[0] in ("python", "python3", "-m"):
            words = words[1:]
        if words[:1] == ["pip3"]:
            words[0] = "pip"
        if words[:2] != ["pip", "install"]:
            raise VenvError(f"field 'install': only `pip install ...` commands are supported, got {part!r}")
        words, skip_next = words[2:], False
        for i, word in enumerate(words):
            if skip_next:
                skip_next = False
                continue
            if word in ("-e", "--editable"):
                target = words[i + 1] if i + 1 < len(words) else ""
                if not is_local(target):
                    raise VenvError(f"field 'install': editable installs other than the repository itself are not supported ({target!r})")
                skip_next = True
            elif word in ("-r", "--requirement"):
                path = words[i + 1] if i + 1 < len(words) else ""
                out += requirement_file(path, read)
                skip_next = True
            elif word.startswith("-"):
                raise VenvError(f"field 'install': pip option {word!r} is not supported (use option `wheels` for a local index)")
            elif not is_local(word):
                out.append(word)
    return out


def is_local(target: str) -> bool:
    return target in (".", "./") or target.startswith(("./", "../", "/", ".["))


def requirement_file(path: str, read: Callable[[str], str | None], seen: tuple[str, ...] = ()) -> list[str]:
    text = read(path)
    if text is None:
        raise VenvError(f"requirements file {path!r} is not in the repository at the base commit")
    return requirement_lines(text, read, os.path.dirname(path), (*seen, path))


def requirement_lines(text: str, read: Callable[[str], str | None], folder: str = "", seen: tuple[str, ...] = ()) -> list[str]:
    """The requirements of a requirements.txt text; `-r` followed inside the repository,
    options, local paths, editable and URL requirements dropped."""
    out = []
    for raw in text.splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            nested = os.path.normpath(os.path.join(folder, line.split(None, 1)[1].strip()))
            if nested not in seen:
                out += requirement_file(nested, read, seen)
            continue
        if line.startswith("-") or is_local(line) or "://" in line or line.startswith("git+"):
            continue
        out.append(line)
    return out


def repo_requirements(read: Callable[[str], str | None], names: list[str]) -> tuple[list[str], str]:
    """(requirements, where) from the repository's metadata files (`names`: its root files)."""
    found: list[str] = []
    where: list[str] = []
    text = read("pyproject.toml") if "pyproject.toml" in names else None
    if text:
        try:
            project = tomllib.loads(text).get("project", {})
        except tomllib.TOMLDecodeError as e:
            raise VenvError(f"pyproject.toml at the base commit does not parse: {e}") from e
        deps = list(project.get("dependencies") or [])
        extras = project.get("optional-dependencies") or {}
        deps += [d for extra in TEST_EXTRAS for d in extras.get(extra, [])]
        if deps:
            found += deps
            where.append("pyproject.toml")
    text = read("setup.cfg") if "setup.cfg" in names else None
    if text:
        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read_string(text)
        except configparser.Error as e:
            raise VenvError(f"setup.cfg at the base commit does not parse: {e}") from e
        deps = cfg_list(cfg.get("options", "install_requires", fallback=""))
        for extra in TEST_EXTRAS:
            deps += cfg_list(cfg.get("options.extras_require", extra, fallback=""))
        if deps:
            found += deps
            where.append("setup.cfg")
    text = read("setup.py") if "setup.py" in names else None
    if text:
        deps = setup_py_requirements(text)
        if deps:
            found += deps
            where.append("setup.py (literal install_requires)")
    for name in sorted(n for n in names if re.fullmatch(r"requirements[\w.-]*\.txt", n) and "doc" not in n):
        deps = requirement_file(name, read)
        if deps:
            found += deps
            where.append(name)
    return found, ", ".join(where) or "the repository (no dependencies found)"


def cfg_list(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]


def setup_py_requirements(text: str) -> list[str]:
    """`install_requires` and test extras of a setup() call, when they are literals (never run)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup":
            for keyword in node.keywords:
                try:
                    value = ast.literal_eval(keyword.value)
                except ValueError:
                    continue
                if keyword.arg == "install_requires" and isinstance(value, (list, tuple)):
                    out += [str(v) for v in value]
                elif keyword.arg == "extras_require" and isinstance(value, dict):
                    out += [str(v) for extra in TEST_EXTRAS for v in value.get(extra, [])]
    return out


def normalized(requirements: list[str]) -> list[str]:
    """Sorted, de-duplicated, whitespace-squeezed: the part of a spec that names the venv."""
    return sorted({re.sub(r"\s+", " ", r.strip()) for r in requirements if r.strip()})


# ---------------------------------------------------------------- building


def venv_path(name: str, requirements: list[str], python: str = SANDBOX_PYTHON) -> Path:
    spec = json.dumps({"python": python, "version": python_version(python), "requirements": normalized(requirements)})
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "repo"
    return cache_root() / f"{safe}-{hashlib.sha256(spec.encode()).hexdigest()[:16]}"


_versions: dict[str, str] = {}


def python_version(python: str) -> str:
    if python not in _versions:
        try:
            out = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, timeout=30)
        except OSError as e:
            raise VenvError(f"the sandbox's Python {python} cannot run: {e}") from e
        _versions[python] = out.stdout.strip()
    return _versions[python]


def ensure_venv(name: str, requirements: list[str], wheels: str | Path | None = None,
                python: str = SANDBOX_PYTHON, timeout_s: float = 1800) -> Path:
    """The cached venv for `requirements` (built when missing); returns its folder.

    Built in a temp folder next to the cache entry and renamed into place, under a file lock,
    so two processes never build the same venv and no half-built venv is ever used.
    """
    requirements = normalized(requirements)
    final = venv_path(name, requirements, python)
    if (final / MARKER).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.with_name(final.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / MARKER).is_file():  # another process built it while we waited
            return final
        if final.exists():
            shutil.rmtree(final)
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            build(tmp, requirements, wheels, python, timeout_s)
            relocate(tmp, final)
            (tmp / MARKER).write_text(json.dumps({"name": name, "python": python, "requirements": requirements,
                                                  "wheels": str(wheels) if wheels else None}, indent=1))
            world_readable(tmp)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def build(dest: Path, requirements: list[str], wheels: str | Path | None, python: str, timeout_s: float) -> None:
    made = subprocess.run([python, "-m", "venv", "--system-site-packages", "--without-pip", str(dest)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise VenvError(f"{python} -m venv failed: {(made.stderr or made.stdout).strip()[-500:]}")
    index = ["--no-index", "--find-links", str(Path(wheels).resolve())] if wheels else []
    if wheels and not Path(wheels).is_dir():
        raise VenvError(f"option wheels: {wheels} is not a folder")
    command = [sys.executable, "-m", "pip", "--python", str(dest / "bin" / "python"), "install", "--no-input",
               "--disable-pip-version-check", "--no-warn-script-location", *index, *requirements]
    env = {**os.environ, "PIP_NO_INPUT": "1"}
    env.pop("PIP_REQUIRE_VIRTUALENV", None)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as e:
        raise VenvError(f"pip install {' '.join(requirements)} ran past {timeout_s:.0f} s") from e
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
        raise VenvError(f"pip install {' '.join(requirements)}{' (wheels: ' + str(wheels) + ')' if wheels else ''} failed: "
                        + " | ".join(lines[-3:]))


def relocate(tmp: Path, final: Path) -> None:
    """Scripts pip wrote name the temp folder in their #! line; point them at the final one."""
    old, new = str(tmp).encode(), str(final).encode()
    for path in (tmp / "bin").iterdir():
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if data.startswith(b"#!") and old in data:
                path.write_bytes(data.replace(old, new))
    cfg = tmp / "pyvenv.cfg"
    cfg.write_text(cfg.read_text().replace(str(tmp), str(final)))


def world_readable(root: Path) -> None:
    """The sandbox runs the tests as an unprivileged uid: it must read (and enter) everything."""
    for folder, dirs, files in os.walk(root):
        os.chmod(folder, os.stat(folder).st_mode | 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)
