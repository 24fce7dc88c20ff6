"""A row's own Python environment: a virtualenv per (repository, dependency spec), cached.

The tests of a task run in the sandbox, whose Python is Debian's `/usr/bin/python3` with its
pytest. A repository that needs packages gets a virtualenv made with that same interpreter
(`/usr/bin/python3 -m venv --system-site-packages --without-pip`, so Debian's pytest stays
importable), its dependencies installed by the host's pip (`pip --python VENV/bin/python
install ...`), and is cached under `$RLYARD_CACHE/code-venvs/<name>-<hash>` (default
`~/.cache/rlyard`). Nothing of the repository runs on the host except its own build backend
when the repository is installed (as `pip install` would run it); setup.py is read with `ast`.

Where the dependencies come from (`plan`), as SWE-bench does:
    the row: `install` (`pip install ...` commands) plus `pip_packages` / `requirements`
    (an empty list says: no package, no venv); an `install` that installs the repository
    (`-e .`, `.[test]`) also brings the repository's own requirements below
    else the repository at the base commit: pyproject.toml ([project] dependencies and the
    test / tests / testing extras), setup.cfg (install_requires, tests_require, those extras),
    setup.py (install_requires, tests_require, those extras; module-level variables followed),
    and the requirement files `reqfiles.choose_files` keeps (root, requirements/ and the test
    folder's; none of a tool's or of another Python version's); pins that cannot both hold
    are refused, naming both files
The repository itself is installed into the venv (non-editable, `--no-deps`) when the row asks
(`install: pip install -e .`, `install_repo: true`) or its version is written from git at build
time (setuptools-scm, hatch-vcs): the files that build writes into the tree reach the workspace.
A spec that comes out empty, with no install, means no venv: the task keeps the sandbox's `python3`.
"""
from __future__ import annotations

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
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rlyard.cache import cache_dir
from rlyard.envs.code import reqfiles
from rlyard.envs.code.repo import RepoError, export_commit, git

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


@dataclass(frozen=True)
class Plan:
    """What a row's venv holds, decided on the host from trusted data."""
    requirements: list[str]  # what pip installs into the venv
    where: str  # where they were read (for messages)
    install_repo: str  # why the repository itself is installed at its base commit; "" = it is not


def plan(row: dict, read: Callable[[str], str | None], listing: list[str], python: str = SANDBOX_PYTHON) -> Plan:
    """The venv of a row, as SWE-bench would make it: the row's own spec (`install` plus
    `pip_packages` / `requirements`), else the repository's metadata; an `install` that
    installs the repository (`pip install -e .[test]`) also brings the repository's own
    requirements and test tools, and the repository is installed (non-editable, into the venv)
    where the row asks for it or its version is generated at build time (`version_from_vcs`)."""
    names = sorted({path.split("/")[0] for path in listing})
    command = str(row.get("install") or "")
    local, extras = project_target(command)
    spec = row_requirements(row, read)
    if spec is not None and spec[0] == [] and not command:
        return Plan([], spec[1], "")  # said explicitly: no package, no venv
    if spec is None:
        requirements, where = repo_requirements(read, listing, python=python)
    else:
        requirements, where = list(spec[0]), spec[1]
        if command:
            more = row_requirements({k: row.get(k) for k in ("pip_packages", "requirements")}, read)
            if more and more[0]:
                requirements += more[0]
                where += f" + {more[1]}"
        if local:
            own, own_where = repo_requirements(read, listing, extras, python)
            requirements += own
            where += f" + the repository's own ({own_where})"
    flag = row.get("install_repo")
    if flag is not None and not isinstance(flag, bool):
        raise VenvError(f"field 'install_repo' must be true or false, got {flag!r}")
    why = ("field 'install_repo'" if flag else "") if flag is not None else \
        ("field 'install' installs the repository" if local else version_from_vcs(read, names))
    try:
        reqfiles.check_pins([(r, where) for r in requirements], python_version(python).split()[0])
    except ValueError as e:
        raise VenvError(str(e)) from e
    return Plan(requirements, where, why)


def project_target(command: str) -> tuple[bool, tuple[str, ...]]:
    """Whether `pip install ...` commands install the repository itself, and the extras they name."""
    for word in shlex.split(command.replace("&&", " ").replace(";", " ")) if command else []:
        match = re.fullmatch(r"(?:\./?|\.\[([\w,\s-]*)\])", word)
        if match:
            return True, tuple(e.strip() for e in (match.group(1) or "").split(",") if e.strip())
    return False, ()


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


def repo_requirements(read: Callable[[str], str | None], listing: list[str], extras: tuple[str, ...] = (),
                      python: str = SANDBOX_PYTHON) -> tuple[list[str], str]:
    """(requirements, where) from the repository's metadata files. `listing`: the paths of the
    base tree (root names alone do too); `extras`: more extras to read than the test ones
    (`pip install -e .[extra]`). Requirement files are chosen by `reqfiles.choose_files`, and two
    pins that cannot both hold are refused (VenvError naming both files)."""
    names = sorted({path.split("/")[0] for path in listing})
    wanted = (*TEST_EXTRAS, *(e for e in extras if e not in TEST_EXTRAS))
    pairs: list[tuple[str, str]] = []
    where: list[str] = []

    def add(deps: list[str], source: str) -> None:
        if deps:
            pairs.extend((str(d), source) for d in deps)
            where.append(source)

    text = read("pyproject.toml") if "pyproject.toml" in names else None
    if text:
        try:
            project = tomllib.loads(text).get("project", {})
        except tomllib.TOMLDecodeError as e:
            raise VenvError(f"pyproject.toml at the base commit does not parse: {e}") from e
        optional = project.get("optional-dependencies") or {}
        add(list(project.get("dependencies") or []) + [d for extra in wanted for d in optional.get(extra, [])], "pyproject.toml")
    text = read("setup.cfg") if "setup.cfg" in names else None
    if text:
        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read_string(text)
        except configparser.Error as e:
            raise VenvError(f"setup.cfg at the base commit does not parse: {e}") from e
        deps = cfg_list(cfg.get("options", "install_requires", fallback=""))
        for extra in wanted:
            deps += cfg_list(cfg.get("options.extras_require", extra, fallback=""))
        add(deps + cfg_list(cfg.get("options", "tests_require", fallback="")), "setup.cfg")
    text = read("setup.py") if "setup.py" in names else None
    if text:
        add(setup_py_requirements(text, wanted), "setup.py")
    for name in reqfiles.choose_files(listing, python_minor(python)):
        try:
            add(requirement_file(name, read), name)
        except VenvError:
            continue  # a listed file that is not text at the base commit
    try:
        reqfiles.check_pins(pairs, python_version(python).split()[0])
    except ValueError as e:
        raise VenvError(str(e)) from e
    return [text for text, _ in pairs], ", ".join(where) or "the repository (no dependencies found)"


def python_minor(python: str) -> tuple[int, int]:
    major, minor = python_version(python).split()[0].split(".")[:2]
    return int(major), int(minor)


VCS_VERSION_BACKENDS = ("setuptools_scm", "setuptools-scm", "hatch-vcs", "hatch_vcs", "versioningit", "flit_scm",
                        "setuptools-git-versioning", "pdm-backend", "poetry-dynamic-versioning", "dunamai")


def version_from_vcs(read: Callable[[str], str | None], names: list[str]) -> str:
    """Why the project must be installed to import (its version module or metadata is written
    at build time from git: setuptools-scm, hatch-vcs, ...), or "" when nothing says so."""
    text = read("pyproject.toml") if "pyproject.toml" in names else None
    if text:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            data = {}
        requires = " ".join(data.get("build-system", {}).get("requires", [])).lower()
        tool = data.get("tool", {})
        if "setuptools_scm" in tool or "setuptools-scm" in tool:
            return "pyproject.toml [tool.setuptools_scm]"
        if tool.get("hatch", {}).get("version", {}).get("source") == "vcs":
            return "pyproject.toml [tool.hatch.version] source = vcs"
        found = [b for b in VCS_VERSION_BACKENDS if b in requires and b != "pdm-backend"]
        if found:
            return f"pyproject.toml build-system requires {found[0]}"
    for name in ("setup.py", "setup.cfg"):
        text = read(name) if name in names else None
        if text and ("use_scm_version" in text or "setuptools_scm" in text):
            return f"{name} uses setuptools_scm"
    return ""


def cfg_list(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]


def setup_py_requirements(text: str, extras: tuple[str, ...] = TEST_EXTRAS) -> list[str]:
    """`install_requires`, `tests_require` and test extras of a setup() call, literal or named
    by module-level variables (`reqfiles.setup_py_values`); setup.py is never run."""
    values = reqfiles.setup_py_values(text)
    out: list[str] = []
    for key in ("install_requires", "tests_require"):
        value = values.get(key)
        if isinstance(value, (list, tuple)):
            out += [str(v) for v in value]
        elif isinstance(value, str):
            out += cfg_list(value)
    extra = values.get("extras_require")
    if isinstance(extra, dict):
        for name in extras:
            value = extra.get(name, [])
            out += [str(v) for v in value] if isinstance(value, (list, tuple)) else cfg_list(str(value))
    return out


def normalized(requirements: list[str]) -> list[str]:
    """Sorted, de-duplicated, whitespace-squeezed: the part of a spec that names the venv."""
    return sorted({re.sub(r"\s+", " ", r.strip()) for r in requirements if r.strip()})


# ---------------------------------------------------------------- building


def venv_path(name: str, requirements: list[str], python: str = SANDBOX_PYTHON, project: str | None = None) -> Path:
    """The cache folder of a spec; `project`: the commit of the repository installed in it."""
    spec = {"python": python, "version": python_version(python), "requirements": normalized(requirements)}
    spec |= {"project": project} if project else {}
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "repo"
    return cache_root() / f"{safe}-{hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]}"


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
                python: str = SANDBOX_PYTHON, timeout_s: float = 1800, project: tuple[Path, str] | None = None) -> Path:
    """The cached venv for `requirements` (built when missing); returns its folder.

    `project`: (mirror, commit) of a repository installed into the venv too, non-editable (the
    venv is shared and read-only), as SWE-bench installs its testbed: its metadata and entry
    points exist, and the files its build writes into the tree (a version module from git) are
    kept in the marker (`generated_files`) for the workspace.

    Built in a temp folder next to the cache entry and renamed into place, under a file lock,
    so two processes never build the same venv and no half-built venv is ever used.
    """
    requirements = normalized(requirements)
    final = venv_path(name, requirements, python, project[1] if project else None)
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
            generated = install_project(tmp, *project, wheels, timeout_s) if project else {}
            relocate(tmp, final)
            (tmp / MARKER).write_text(json.dumps({"name": name, "python": python, "requirements": requirements,
                                                  "wheels": str(wheels) if wheels else None,
                                                  "project": project[1] if project else None, "generated": generated}, indent=1))
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
    if requirements:
        pip_install(dest, requirements, wheels, timeout_s, {}, " ".join(requirements))


def pip_install(dest: Path, args: list[str], wheels: str | Path | None, timeout_s: float, env: dict[str, str], what: str) -> None:
    """The host's pip installing into the venv at `dest` (from `wheels` only, when given)."""
    if wheels and not Path(wheels).is_dir():
        raise VenvError(f"option wheels: {wheels} is not a folder")
    index = ["--no-index", "--find-links", str(Path(wheels).resolve())] if wheels else []
    command = [sys.executable, "-m", "pip", "--python", str(dest / "bin" / "python"), "install", "--no-input",
               "--disable-pip-version-check", "--no-warn-script-location", *index, *args]
    env = {**os.environ, "PIP_NO_INPUT": "1", **env}
    env.pop("PIP_REQUIRE_VIRTUALENV", None)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as e:
        raise VenvError(f"pip install {what} ran past {timeout_s:.0f} s") from e
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
        raise VenvError(f"pip install {what}{' (wheels: ' + str(wheels) + ')' if wheels else ''} failed: " + " | ".join(lines[-3:]))


BUILD_LEFTOVERS = ("build/", "dist/", ".eggs/", ".git/")


def install_project(dest: Path, mirror: Path, commit: str, wheels: str | Path | None, timeout_s: float) -> dict[str, str]:
    """Install the repository at `commit` into the venv (`--no-deps`: its requirements are in
    already), built from an exported tree; returns the text files the build wrote into that tree
    (a version module from setuptools-scm / hatch-vcs), which the workspace lacks otherwise.
    The tree has no git history, so the version comes from the nearest tag (SETUPTOOLS_SCM_PRETEND_VERSION)."""
    with tempfile.TemporaryDirectory(prefix="rlyard-install-") as tmp:
        tree = Path(tmp) / "tree"
        export_commit(mirror, commit, tree)
        before = {p for p in tree.rglob("*") if p.is_file()}
        env = {"SETUPTOOLS_SCM_PRETEND_VERSION": tag_version(mirror, commit)}
        pip_install(dest, ["--no-deps", str(tree)], wheels, timeout_s, env, f"--no-deps <{mirror.name} at {commit[:12]}>")
        generated = {}
        for path in sorted(p for p in tree.rglob("*") if p.is_file() and p not in before):
            relative = path.relative_to(tree).as_posix()
            if relative.startswith(BUILD_LEFTOVERS) or ".egg-info/" in relative or "__pycache__" in relative:
                continue
            if path.suffix in (".py", ".txt", ".json", ".cfg", ".toml") and path.stat().st_size <= 256 << 10:
                try:
                    generated[relative] = path.read_text()
                except UnicodeDecodeError:
                    continue
        return generated


def tag_version(mirror: Path, commit: str) -> str:
    """The version of the nearest tag at or before `commit` (`v1.2.3` -> 1.2.3), else 0.0.0."""
    from packaging.version import InvalidVersion, Version

    try:
        tag = git("describe", "--tags", "--abbrev=0", commit, cwd=mirror).decode().strip()
        return str(Version(tag.lstrip("vV")))
    except (RepoError, InvalidVersion):
        return "0.0.0"


def generated_files(folder: Path) -> dict[str, str]:
    """The files the repository's build wrote into its tree, recorded when the venv was made."""
    try:
        return dict(json.loads((folder / MARKER).read_text()).get("generated") or {})
    except (OSError, ValueError):
        return {}


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
