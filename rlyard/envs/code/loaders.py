"""Code tasks from the files users bring: SWE-bench rows and the production recipe's records.

    SWE-bench:  instance_id, repo, base_commit, problem_statement, patch, test_patch,
                FAIL_TO_PASS, PASS_TO_PASS (lists, or JSON strings of lists)
    recipe:     image, workdir, instance_id, problem_statement, test_patch, test_command, timeout

Rows come from .jsonl, .json (a list), .parquet or a `datasets` folder (`save_to_disk`).
SWE-bench repositories come from local mirrors (`mirrors/<owner>__<name>`, `<owner>/<name>` or
`<name>`); the base tree is exported without history. A recipe record's `workdir` is a
checkout (relative paths: under `mirrors`, else next to the data file); offline there is no
container, so `image` is kept as metadata. A bad row is rejected with its number and field.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlyard.envs.code.repo import RepoError, commits_past, git, make_patch, touched_paths
from rlyard.envs.code.tasks import RUNNER, RUNNER_PATH, payload

SWEBENCH_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")
RECIPE_FIELDS = ("instance_id", "workdir", "problem_statement", "test_patch", "test_command", "timeout")
RECIPE_ALIASES = {"working_dir": "workdir", "cwd": "workdir", "verifier_timeout": "timeout", "timeout_s": "timeout"}


class RowError(ValueError):
    pass


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if path.is_dir():
        try:
            import datasets
        except ImportError as e:
            raise RowError(f"{path}: reading a `datasets` folder needs `pip install datasets`") from e
        data = datasets.load_from_disk(str(path))
        if isinstance(data, datasets.DatasetDict):
            data = data[next(iter(data))]
        return [dict(row) for row in data]
    if not path.is_file():
        raise RowError(f"{path}: no such file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text()
    if path.suffix == ".json":
        rows = json.loads(text)
        if not isinstance(rows, list):
            raise RowError(f"{path}: a .json task file must hold a list of rows")
        return rows
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise RowError(f"{path}: row {number}: not valid JSON ({e})") from e
    return rows


def load_records(source: str | Path, mirrors: str | Path | None = None) -> list[dict[str, Any]]:
    """Task payloads for every row of `source`; the first bad row raises, naming row and field."""
    source = Path(source)
    root = Path(mirrors) if mirrors else (source if source.is_dir() else source.parent)
    records = []
    for number, row in enumerate(read_rows(source), 1):
        where = f"{source}: row {number}"
        if not isinstance(row, dict):
            raise RowError(f"{where}: expected an object, got {type(row).__name__}")
        try:
            if "test_command" in row or {"workdir", *RECIPE_ALIASES} & set(row):
                records.append(recipe_record(row, where, root))
            elif "base_commit" in row or "FAIL_TO_PASS" in row:
                records.append(swebench_record(row, where, root))
            else:
                raise RowError(f"{where}: neither a SWE-bench row ({', '.join(SWEBENCH_FIELDS)}) "
                               f"nor a recipe record ({', '.join(RECIPE_FIELDS)}); fields: {sorted(row)}")
        except (RepoError, ValueError) as e:
            raise RowError(str(e) if str(e).startswith(where) else f"{where}: {e}") from e
    return records


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
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RowError(f"{where}: field {field!r} must be a list of test ids")
    return value


def find_mirror(root: Path, repo: str, where: str) -> Path:
    owner, _, name = repo.rpartition("/")
    candidates = [root / f"{owner}__{name}", root / owner / name, root / name]
    candidates += [c.with_name(c.name + ".git") for c in candidates]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise RowError(f"{where}: no local mirror of {repo!r}; tried {', '.join(str(c) for c in candidates[:3])} (+ .git)")


def base_versions(paths: list[str], read) -> dict[str, str | None]:
    out = {}
    for path in paths:
        try:
            out[path] = read(path)
        except (RepoError, FileNotFoundError, IsADirectoryError):
            out[path] = None
    return out


def swebench_record(row: dict, where: str, root: Path) -> dict[str, Any]:
    require(row, SWEBENCH_FIELDS[:6], where, "SWE-bench")
    fail, keep = (test_ids(row.get(f, []), f, where) for f in ("FAIL_TO_PASS", "PASS_TO_PASS"))
    if not fail:
        raise RowError(f"{where}: field 'FAIL_TO_PASS' is empty: nothing would show the issue fixed")
    mirror = find_mirror(root, row["repo"], where)
    commit = row["base_commit"]
    git("cat-file", "-e", f"{commit}^{{commit}}", cwd=mirror)
    test_patch = row["test_patch"] + _runner_patch()
    base = base_versions(touched_paths(test_patch), lambda p: git("show", f"{commit}:{p}", cwd=mirror).decode())
    return payload(instance_id=str(row["instance_id"]), repo=row["repo"], source={"mirror": str(mirror), "base_commit": commit},
                   problem_statement=row["problem_statement"], test_patch=test_patch, patch=row["patch"],
                   test_command=f"python3 -P {RUNNER_PATH} " + " ".join(_quote(t) for t in fail + keep),
                   timeout_s=float(row.get("timeout", 300)), base_files=base, difficulty=str(row.get("difficulty", "")))


def recipe_record(row: dict, where: str, root: Path) -> dict[str, Any]:
    row = {RECIPE_ALIASES.get(k, k): v for k, v in row.items()}
    require(row, RECIPE_FIELDS, where, "recipe (seven-field)")
    workdir = Path(row["workdir"])
    workdir = workdir if workdir.is_absolute() else root / workdir
    if not workdir.is_dir():
        raise RowError(f"{where}: field 'workdir': {workdir} is not a directory")
    try:
        timeout = float(row["timeout"])
    except (TypeError, ValueError) as e:
        raise RowError(f"{where}: field 'timeout' must be a number of seconds, got {row['timeout']!r}") from e
    if (workdir / ".git").exists():  # refused at load time too, not only when an episode starts
        base_commit = row.get("base_commit") or git("rev-parse", "HEAD", cwd=workdir).decode().strip()
        later = commits_past(workdir, base_commit)
        if later:
            raise RowError(f"{where}: field 'workdir': {workdir} has history past the base commit "
                           f"({len(later)} later commit(s)); the fix would be readable with git log")
    base = base_versions(touched_paths(row["test_patch"]), lambda p: (workdir / p).read_text())
    return payload(instance_id=str(row["instance_id"]), repo=str(row.get("repo") or workdir.name),
                   source={"workdir": str(workdir), "base_commit": row.get("base_commit"), "image": row.get("image")},
                   problem_statement=row["problem_statement"], test_patch=row["test_patch"], patch=row.get("patch", ""),
                   test_command=row["test_command"], timeout_s=timeout, base_files=base,
                   difficulty=str(row.get("difficulty", "")))


def _runner_patch() -> str:
    return make_patch({RUNNER_PATH: None}, {RUNNER_PATH: RUNNER})


def _quote(test_id: str) -> str:
    return "'" + test_id.replace("'", "'\"'\"'") + "'"
