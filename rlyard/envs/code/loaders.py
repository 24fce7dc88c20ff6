"""Code tasks from the files users bring: SWE-bench rows and the production recipe's records.

    SWE-bench:  instance_id, repo, base_commit, problem_statement, patch, test_patch,
                FAIL_TO_PASS, PASS_TO_PASS (lists of pytest node ids, or JSON strings of lists);
                optional: timeout, difficulty, install / pip_packages / requirements
    recipe:     image, workdir, instance_id, problem_statement, test_patch, test_command, timeout

Rows come from .jsonl, .json (a list), .parquet or a `datasets` folder (`save_to_disk`; a
DatasetDict with several splits needs option `dataset_split`). SWE-bench repositories come
from local mirrors (`mirrors/<owner>__<name>`, `<owner>/<name>` or `<name>`); the base tree is
exported without history. A SWE-bench row gets its own virtualenv when its repository needs
packages (see `venvs.py`). A recipe record's `workdir` is a checkout (relative paths: under
`mirrors`, else next to the data file); offline there is no container, so `image` is kept as
metadata. A bad row is refused with one line naming the file, the row number and the field:
a malformed row (RowError) stops the load; a well-formed row that cannot load here (RowLoadError:
no mirror, a patch that does not apply, an environment that cannot be built) stops it too,
unless the caller passes a `problems` list, as validate and make_tasks do, to go on without it.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from rlyard.envs.code import venvs
from rlyard.envs.code.payload import RUNNER, RUNNER_PATH, TEST_DIRS, payload, runner_command, split_of, trusted_test_paths
from rlyard.envs.code.repo import PatchError, RepoError, apply_patch, commits_past, git, make_patch, touched_paths

SWEBENCH_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")
RECIPE_FIELDS = ("instance_id", "workdir", "problem_statement", "test_patch", "test_command", "timeout")
RECIPE_ALIASES = {"working_dir": "workdir", "cwd": "workdir", "verifier_timeout": "timeout", "timeout_s": "timeout"}
DIFFICULTIES = {  # SWE-bench Verified's annotation -> the `difficulty` option's values
    "easy": "easy", "medium": "medium", "hard": "hard",
    "<15 min fix": "easy", "15 min - 1 hour": "medium", "1-4 hours": "hard", ">4 hours": "hard",
}
DEFAULT_TIMEOUT_S = 300.0
# tests/test_x.py::TestClass::test_y[param]: a .py file, then `::`-separated names (doctests: dotted)
NODE_ID = re.compile(r"(?P<file>[^\s:\[\]]+\.py)(::[\w.-]+)+(\[.*\])?", re.S)
_GIT_HEADER = re.compile(r"^diff --git a/\S+ b/\S+$", re.M)


class SourceError(ValueError):
    """A task source that cannot be used (a bad row, a bad file, an empty split): one line."""


class RowError(SourceError):
    """A row the loader refuses: its own fields are malformed (the file is wrong)."""


class RowLoadError(RowError):
    """A well-formed row that cannot be loaded here: its mirror or commit is missing, a patch
    does not apply, its environment cannot be built. `load_records(problems=[...])` reports it
    and goes on with the other rows."""

    def __init__(self, message: str, instance_id: str = ""):
        super().__init__(message)
        self.instance_id = instance_id  # the row's id (or "row N"), for reports that go on


def one_line(text: str) -> str:
    return " | ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())


def read_rows(path: str | Path, dataset_split: str | None = None) -> list[dict[str, Any]]:
    path = Path(path)
    if path.is_dir():
        try:
            import datasets
        except ImportError as e:
            raise RowError(f"{path}: reading a `datasets` folder needs `pip install datasets`") from e
        try:
            data = datasets.load_from_disk(str(path))
        except (FileNotFoundError, ValueError) as e:
            raise RowError(f"{path}: not a `datasets` folder saved with save_to_disk ({one_line(e)})") from e
        if isinstance(data, datasets.DatasetDict):
            splits = list(data)
            if dataset_split is not None:
                if dataset_split not in data:
                    raise RowError(f"{path}: option dataset_split={dataset_split!r} is not a split of this DatasetDict; "
                                   f"its splits: {', '.join(splits)}")
                data = data[dataset_split]
            elif len(splits) == 1:
                data = data[splits[0]]
            else:
                raise RowError(f"{path}: a DatasetDict with splits {', '.join(splits)}; "
                               f"choose one with option dataset_split (e.g. -o dataset_split={splits[0]})")
        elif dataset_split is not None:
            raise RowError(f"{path}: option dataset_split={dataset_split!r} given, but this folder is a single Dataset")
        return [dict(row) for row in data]
    if dataset_split is not None:
        raise RowError(f"{path}: option dataset_split is only for `datasets` folders (a DatasetDict)")
    if not path.is_file():
        raise RowError(f"{path}: no such file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise RowError(f"{path}: line {line}: not UTF-8 (byte 0x{data[e.start]:02x}); save the file as UTF-8") from None
    if path.suffix == ".json":
        try:
            rows = json.loads(text)
        except ValueError as e:
            raise RowError(f"{path}: not valid JSON ({e})") from e
        if not isinstance(rows, list):
            raise RowError(f"{path}: a .json task file must hold a list of rows")
        return rows
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise RowError(f"{path}: row {number}: not valid JSON ({e.msg} at column {e.colno})") from e
    return rows


def load_records(source: str | Path, mirrors: str | Path | None = None, options: dict[str, Any] | None = None,
                 problems: list[RowLoadError] | None = None) -> list[dict[str, Any]]:
    """Task payloads for every row of `source`. A malformed row raises a one-line RowError
    naming the file, the row and the field. A row that cannot load (RowLoadError) raises too,
    unless `problems` is a list: then it is appended there and the other rows still load.
    `options`: the family options (dataset_split, wheels, build_venvs are read here)."""
    options = options or {}
    source = Path(source)
    root = Path(mirrors) if mirrors else (source if source.is_dir() else source.parent)
    records = []
    for number, row in enumerate(read_rows(source, options.get("dataset_split")), 1):
        where = f"{source}: row {number}"
        if not isinstance(row, dict):
            raise RowError(f"{where}: expected an object, got {type(row).__name__}")
        try:
            if "test_command" in row or {"workdir", *RECIPE_ALIASES} & set(row):
                records.append(recipe_record(row, where, root))
            elif "base_commit" in row or "FAIL_TO_PASS" in row:
                records.append(swebench_record(row, where, root, options))
            else:
                raise RowError(f"{where}: neither a SWE-bench row ({', '.join(SWEBENCH_FIELDS)}) "
                               f"nor a recipe record ({', '.join(RECIPE_FIELDS)}); fields: {sorted(row)}")
        except (RepoError, ValueError) as e:
            message = one_line(e)
            message = message if message.startswith(where) else f"{where}: {message}"
            if isinstance(e, RowError) and not isinstance(e, RowLoadError):
                raise RowError(message) from e
            error = RowLoadError(message, str(row.get("instance_id") or f"row {number}"))
            if problems is None:
                raise error from e
            problems.append(error)
    return records


def check_split(chosen: list, records: list[dict[str, Any]], split: str, opts: dict[str, Any]) -> None:
    """Raise when a user's source leaves no task in `split` (called by make_tasks before `[:n]`).

    `chosen`: the records (or tasks) kept for the split after the difficulty filter; `records`:
    all loaded. The message names the file, the row count and the option to change.
    """
    if opts.get("source") is None or chosen:
        return
    percent = int(opts.get("eval_percent", 25))
    in_split = sum(split_of(r["instance_id"], percent) == split for r in records)
    if not records:
        why = "the file holds no rows"
    elif in_split and opts.get("difficulty") is not None:
        kinds = sorted({r.get("difficulty") or "none" for r in records})
        why = (f"{len(records)} rows loaded, {in_split} in the split; difficulty={opts['difficulty']} kept none "
               f"(their difficulties: {', '.join(kinds)}); try another -o difficulty=...")
    else:
        hint = "a larger -o eval_percent=..." if split == "eval" else "a smaller -o eval_percent=..."
        why = f"{len(records)} rows loaded; eval_percent={percent} put none there; try {hint}"
    raise SourceError(f"{opts['source']}: no tasks in split {split} ({why})")


def require(row: dict, fields: tuple[str, ...], where: str, kind: str) -> None:
    for field in fields:
        if row.get(field) in (None, ""):
            raise RowError(f"{where}: missing field {field!r} ({kind} rows need {', '.join(fields)})")


def test_ids(value: Any, field: str, where: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise RowError(f"{where}: field {field!r} must be a list of test ids or a JSON string of one") from e
    if hasattr(value, "tolist"):  # a numpy array from parquet / pandas
        value = value.tolist()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RowError(f"{where}: field {field!r} must be a list of test ids")
    for test_id in value:
        if not NODE_ID.fullmatch(test_id):
            raise RowError(f"{where}: field {field!r}: {test_id!r} is not a pytest node id (path/to/test_file.py::test_name); "
                           "rows of other test runners (Django's 'test_x (module.Class)', bare test names) are not supported")
    return value


def test_file(test_id: str) -> str:
    return NODE_ID.fullmatch(test_id).group("file")


def difficulty_of(row: dict, where: str) -> tuple[str, str]:
    """(difficulty, as the row spelt it): SWE-bench Verified's time buckets map to easy/medium/hard."""
    raw = row.get("difficulty")
    if raw in (None, ""):
        return "", ""
    key = " ".join(str(raw).split())
    mapped = DIFFICULTIES.get(key) or DIFFICULTIES.get(key.lower())
    if mapped is None:
        raise RowError(f"{where}: field 'difficulty': {raw!r} is not one of {', '.join(repr(k) for k in DIFFICULTIES)}")
    return mapped, str(raw)


def timeout_of(row: dict, where: str, default: float | None = None) -> float:
    value = row.get("timeout", default)
    try:
        if isinstance(value, bool):
            raise TypeError
        timeout = float(value)
    except (TypeError, ValueError) as e:
        raise RowError(f"{where}: field 'timeout' must be a number of seconds, got {value!r}") from e
    if not math.isfinite(timeout) or timeout <= 0:
        raise RowError(f"{where}: field 'timeout' must be a positive number of seconds, got {value!r}")
    return timeout


def git_style(patch: str, field: str, where: str) -> None:
    if not _GIT_HEADER.search(patch or ""):
        raise RowError(f"{where}: field {field!r} is not a git-style patch (it needs `diff --git a/PATH b/PATH` headers, "
                       "as `git diff` writes them)")


def is_git_dir(path: Path) -> bool:
    """A bare mirror (HEAD + objects/) or a clone with a work tree (.git)."""
    return ((path / "HEAD").is_file() and (path / "objects").is_dir()) or (path / ".git").exists()


def find_mirror(root: Path, repo: str, where: str) -> Path:
    """The mirror of `owner/name` under `root`: `<owner>__<name>`, `<owner>/<name>` or `<name>`,
    each with or without `.git`. A candidate counts only when it is a git repository, so an
    owner folder (`astropy/` holding `astropy.git`) is never taken for the mirror."""
    owner, _, name = repo.rpartition("/")
    bases = [root / f"{owner}__{name}", root / owner / name, root / name]
    candidates = [c for base in bases for c in (base, base.with_name(base.name + ".git"))]
    for candidate in candidates:
        if candidate.is_dir() and is_git_dir(candidate):
            return candidate
    folders = [str(c) for c in candidates if c.is_dir()]
    found = f"; {', '.join(folders)} {'is a folder' if len(folders) == 1 else 'are folders'} but not a git repository" if folders else ""
    raise RowLoadError(f"{where}: no local mirror of {repo!r}; tried {', '.join(str(c) for c in bases)} "
                       f"(+ .git){found}; make one with: git clone --mirror https://github.com/{repo} "
                       f"{root / (owner + '__' + name)}")


def base_versions(paths: list[str], read) -> dict[str, str | None]:
    out = {}
    for path in paths:
        try:
            out[path] = read(path)
        except (RepoError, FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
            out[path] = None
    return out


def swebench_record(row: dict, where: str, root: Path, options: dict[str, Any] | None = None) -> dict[str, Any]:
    options = options or {}
    require(row, SWEBENCH_FIELDS[:6], where, "SWE-bench")
    fail, keep = (test_ids(row.get(f, []), f, where) for f in ("FAIL_TO_PASS", "PASS_TO_PASS"))
    if not fail:
        raise RowError(f"{where}: field 'FAIL_TO_PASS' is empty: nothing would show the issue fixed")
    difficulty, difficulty_raw = difficulty_of(row, where)
    timeout_s = timeout_of(row, where, DEFAULT_TIMEOUT_S)
    git_style(row["patch"], "patch", where)
    git_style(row["test_patch"], "test_patch", where)
    mirror = find_mirror(root, row["repo"], where)
    commit = str(row["base_commit"])
    try:
        git("cat-file", "-e", f"{commit}^{{commit}}", cwd=mirror)
    except RepoError as e:
        raise RowLoadError(f"{where}: field 'base_commit': {commit} is not a commit of the mirror {mirror} of {row['repo']!r} "
                           f"({one_line(e)})") from e

    def read(path: str) -> str | None:
        try:
            return git("show", f"{commit}:{path}", cwd=mirror).decode()
        except (RepoError, UnicodeDecodeError):
            return None

    try:
        apply_patch(base_versions(touched_paths(row["patch"]), read), row["patch"])
    except PatchError as e:
        raise RowLoadError(f"{where}: field 'patch' does not apply at the base commit: {one_line(e)}") from e
    test_patch = row["test_patch"] + _runner_patch()
    hidden = touched_paths(test_patch)
    expected = list(dict.fromkeys(fail + keep))
    files = list(dict.fromkeys(test_file(t) for t in expected))
    listing = git("ls-tree", "-r", "--name-only", commit, cwd=mirror).decode().splitlines()
    guarded = trusted_test_paths(files, listing)
    base = base_versions(list(dict.fromkeys(hidden + files + guarded)), read)
    try:
        graded = apply_patch({p: base[p] for p in hidden}, test_patch)
    except PatchError as e:
        raise RowLoadError(f"{where}: field 'test_patch' does not apply at the base commit: {one_line(e)}") from e
    absent = [f for f in files if (graded.get(f) if f in graded else base.get(f)) is None]
    if absent:
        raise RowLoadError(f"{where}: test file(s) {', '.join(absent)} of FAIL_TO_PASS / PASS_TO_PASS are neither at the base "
                       "commit nor added by the test patch")
    python, binds, generated = "python3", [], {}
    if options.get("build_venvs", True):
        try:
            plan = venvs.plan(row, read, listing)
            if plan.requirements or plan.install_repo:
                folder = venvs.ensure_venv(row["repo"].replace("/", "__"), plan.requirements, options.get("wheels"),
                                           project=(mirror, commit) if plan.install_repo else None)
                python, binds, generated = str(folder / "bin" / "python"), [str(folder)], venvs.generated_files(folder)
        except venvs.VenvError as e:
            raise RowLoadError(f"{where}: its environment cannot be built: {one_line(e)}") from e
    record = payload(instance_id=str(row["instance_id"]), repo=row["repo"], source={"mirror": str(mirror), "base_commit": commit,
                                                                     **({"generated": generated} if generated else {})},
                     problem_statement=row["problem_statement"], test_patch=test_patch, patch=row["patch"],
                     test_command=runner_command(expected, python=python), timeout_s=timeout_s, base_files=base,
                     difficulty=difficulty, extra_reset=[f for f in files + guarded if f not in hidden], expected_tests=expected,
                     xfail_ok=[t for t in keep if t not in fail], ro_binds=binds)
    record["difficulty_raw"] = difficulty_raw
    return record


def recipe_record(row: dict, where: str, root: Path) -> dict[str, Any]:
    row = {RECIPE_ALIASES.get(k, k): v for k, v in row.items()}
    require(row, RECIPE_FIELDS, where, "recipe (seven-field)")
    workdir = Path(row["workdir"])
    workdir = workdir if workdir.is_absolute() else root / workdir
    if not workdir.is_dir():
        raise RowLoadError(f"{where}: field 'workdir': {workdir} is not a directory")
    timeout = timeout_of(row, where)
    difficulty, difficulty_raw = difficulty_of(row, where)
    git_style(row["test_patch"], "test_patch", where)
    if (workdir / ".git").exists():  # refused at load time too, not only when an episode starts
        base_commit = row.get("base_commit") or git("rev-parse", "HEAD", cwd=workdir).decode().strip()
        later = commits_past(workdir, base_commit)
        if later:
            raise RowLoadError(f"{where}: field 'workdir': {workdir} has history past the base commit "
                           f"({len(later)} later commit(s)); the fix would be readable with git log")
    base = base_versions(touched_paths(row["test_patch"]), lambda p: (workdir / p).read_text())
    record = payload(instance_id=str(row["instance_id"]), repo=str(row.get("repo") or workdir.name),
                     source={"workdir": str(workdir), "base_commit": row.get("base_commit"), "image": row.get("image")},
                     problem_statement=row["problem_statement"], test_patch=row["test_patch"], patch=row.get("patch", ""),
                     test_command=row["test_command"], timeout_s=timeout, base_files=base, difficulty=difficulty)
    record["difficulty_raw"] = difficulty_raw
    return record


def _runner_patch() -> str:
    return make_patch({RUNNER_PATH: None}, {RUNNER_PATH: RUNNER})


# ---------------------------------------------------------------- rows from bug-fix commits

def is_test_path(path: str) -> bool:
    """SWE-bench's split of a fix commit: test folders, test_*.py / *_test.py and conftest.py go
    to the test patch; the rest is the fix."""
    *folders, name = path.split("/")
    return bool(set(TEST_DIRS) & set(folders)) or name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def row_from_commit(mirror: str | Path, commit: str, fail_to_pass: list[str], pass_to_pass: list[str], *, repo: str,
                    instance_id: str | None = None, problem_statement: str | None = None, **fields: Any) -> dict[str, Any]:
    """A SWE-bench row from a bug-fix commit of a local mirror: base_commit = the commit's parent,
    `patch` = its non-test part, `test_patch` = its test part (see `is_test_path`), both as
    `git diff` writes them; the problem statement defaults to the commit message."""
    mirror = Path(mirror)
    fix = git("rev-parse", f"{commit}^{{commit}}", cwd=mirror).decode().strip()
    base = git("rev-parse", f"{fix}^", cwd=mirror).decode().strip()
    changed = git("diff", "--no-renames", "--name-only", base, fix, cwd=mirror).decode().splitlines()
    tests, code = [p for p in changed if is_test_path(p)], [p for p in changed if not is_test_path(p)]
    if not tests or not code:
        raise RepoError(f"{repo}@{fix[:12]}: a fix commit must change both tests and code (tests: {tests}, code: {code})")

    def diff(paths: list[str]) -> str:
        return git("diff", "--no-color", "--no-ext-diff", "--no-renames", "--src-prefix=a/", "--dst-prefix=b/",
                   base, fix, "--", *paths, cwd=mirror).decode()

    message = git("log", "-1", "--format=%B", fix, cwd=mirror).decode().strip()
    return {"instance_id": instance_id or f"{repo.replace('/', '__')}-{fix[:12]}", "repo": repo, "base_commit": base,
            "problem_statement": problem_statement or message, "patch": diff(code), "test_patch": diff(tests),
            "FAIL_TO_PASS": list(fail_to_pass), "PASS_TO_PASS": list(pass_to_pass), **fields}
