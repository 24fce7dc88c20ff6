"""Code tasks: the built-in offline set, or rows users bring (`loaders.py`); `make_tasks`, options, splits.

Every task becomes a payload (see `payload.py`). Built-in layout (rlyard/envs/code/builtin/):
    <repo>/repo/...                    the clean repository (the reference fix of every task)
    <repo>/tasks/<id>/task.yaml        problem_statement, difficulty, timeout_s
    <repo>/tasks/<id>/bug.patch        git-style diff from the clean repository to the task's base commit (the bug)
    <repo>/tasks/<id>/tests/...        hidden tests: the repository's tests/ folder as the test patch leaves it

bug.patch only changes files of the clean repository (no new or deleted files); the reference
fix is its reverse.
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from rlyard.envs.code.collect import collect_node_ids
from rlyard.envs.code.generate import GENERATED, generated_records
from rlyard.envs.code.loaders import RowLoadError, SourceError, check_split, load_records
from rlyard.envs.code.payload import RUNNER, RUNNER_PATH, payload, runner_command, split_of, trusted_test_paths
from rlyard.envs.code.repo import PatchError, apply_patch, make_patch, touched_paths
from rlyard.envs.splits import merge_options
from rlyard.sandbox import require_sealed
from rlyard.types import Task

BUILTIN = Path(__file__).with_name("builtin")
ARMS = {"bash": ["bash", "submit"], "edit": ["read_file", "write_file", "edit_file", "grep", "glob", "submit"]}
DEFAULTS: dict[str, Any] = {
    "source": None,  # None = the built-in set; "generated" = generate.py's tasks; else a .jsonl / .json / .parquet file or a `datasets` folder
    "mirrors": None,  # folder of local git mirrors (SWE-bench rows) / root of relative working dirs
    "arms": ARMS,  # harness arms: name -> tool names
    "arm_weights": {"bash": 0.5, "edit": 0.5},  # how often each arm is drawn (a whole group shares one)
    "guard": True,  # answer "Permission denied" to reads of hidden tests, git history, URL installs
    "tool_format": "hermes",  # or bash_block (bash-only arms)
    "eval_percent": 25,  # share of tasks (stable hash of the id) in the eval split; 100 = all (generated: held-out combinations)
    "timeout_is_infra": True,  # a test command that times out: infra failure (True) or reward 0
    "difficulty": None,  # keep only "easy" | "medium" | "hard"
    "allow_weak_isolation": False,  # run without bubblewrap (the sandbox could then read hidden tests)
    "dataset_split": None,  # the split of a DatasetDict folder to read (needed when it has several)
    "wheels": None,  # a local wheel folder for the per-repository venvs (pip --no-index --find-links)
    "build_venvs": True,  # build a cached venv per repository for SWE-bench rows that need packages
}


def read_tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def builtin_records(root: Path = BUILTIN) -> list[dict[str, Any]]:
    """One payload per built-in task, sorted by id."""
    records = []
    for repo_dir in sorted(p for p in root.iterdir() if (p / "repo").is_dir()) if root.is_dir() else []:
        clean = read_tree(repo_dir / "repo")
        visible_tests = sorted(p for p in clean if p.startswith("tests/") and Path(p).name.startswith("test_"))
        for task_dir in sorted(p for p in (repo_dir / "tasks").iterdir() if p.is_dir()):
            meta = yaml.safe_load((task_dir / "task.yaml").read_text())
            for field in ("problem_statement", "difficulty"):
                if field not in meta:
                    raise ValueError(f"{task_dir / 'task.yaml'}: missing field {field!r}")
            overlay = read_bug(task_dir / "bug.patch", clean, repo_dir.name)
            hidden = {f"tests/{path}": text for path, text in read_tree(task_dir / "tests").items()}
            base = {**clean, **overlay}
            guarded = trusted_test_paths(sorted({*hidden, *visible_tests}), sorted(base))
            test_patch = make_patch({p: base.get(p) for p in hidden} | {RUNNER_PATH: None}, hidden | {RUNNER_PATH: RUNNER})
            tests = sorted({p for p in hidden if Path(p).name.startswith("test_")} | set(visible_tests))
            gold = {**clean, **hidden, RUNNER_PATH: RUNNER}
            records.append(dict(gold=gold, tests=tests, fields=dict(
                instance_id=task_dir.name, repo=repo_dir.name, source={"files": base},
                problem_statement=meta["problem_statement"].strip(), test_patch=test_patch,
                patch=make_patch({p: overlay[p] for p in overlay}, {p: clean[p] for p in overlay}),
                test_command=runner_command(tests), timeout_s=float(meta.get("timeout_s", 60)),
                base_files={p: base.get(p) for p in [*hidden, RUNNER_PATH, *visible_tests, *guarded]},
                difficulty=meta["difficulty"], extra_reset=[*visible_tests, *guarded])))
    with ThreadPoolExecutor(max_workers=2) as pool:  # one sandboxed collection per task, cached
        expected = list(pool.map(lambda r: collect_node_ids(r["gold"], r["tests"], runner_command(["--collect", *r["tests"]])), records))
    return [payload(**r["fields"], expected_tests=ids) for r, ids in zip(records, expected)]


def read_bug(path: Path, clean: dict[str, str], repo: str) -> dict[str, str]:
    """The files a task's bug.patch changes, as they read at its base commit (the clean repo's
    versions with the patch applied); a clear error naming the file when it cannot be used."""
    if not path.is_file():
        raise ValueError(f"{path}: missing; every built-in task needs a bug.patch (a diff from {repo}/repo to its base)")
    patch = path.read_text()
    try:
        paths = touched_paths(patch)
        stray = [p for p in paths if p not in clean]
        if stray:
            raise PatchError(f"{', '.join(stray)} {'is not a file' if len(stray) == 1 else 'are not files'} of {repo}/repo "
                             "(a bug.patch only changes files of the clean repository)")
        overlay = apply_patch({p: clean[p] for p in paths}, patch)
    except PatchError as e:
        raise ValueError(f"{path}: {e}") from e
    deleted = [p for p, text in overlay.items() if text is None]
    if deleted:
        raise ValueError(f"{path}: deletes {', '.join(deleted)} (a bug.patch only changes files of the clean repository)")
    return overlay


def make_tasks(split: str, n: int, seed: int, **options: Any) -> list[Task]:
    """The tasks of `split`; a user's row that cannot load is printed on stderr (one line naming the row
    and why) and left out, and the others load (`load_tasks` hands those rows back instead)."""
    problems: list[RowLoadError] = []
    tasks = load_tasks(split, n, seed, problems, **options)
    for problem in problems:  # on stderr whatever the logging setup: the user's data lost a row
        print(f"rlyard: skipped: {problem}", file=sys.stderr)
    return tasks


def load_tasks(split: str, n: int, seed: int, problems: list[RowLoadError], **options: Any) -> list[Task]:
    """make_tasks, with the rows of a user's source that cannot load appended to `problems`."""
    opts = merge_options("code", split, n, options, DEFAULTS)
    check_options(opts)
    require_sealed(bool(opts["allow_weak_isolation"]), "the code family (its tasks hold hidden tests and reference fixes)")
    if opts["source"] is None:
        records = builtin_records()
    elif opts["source"] == GENERATED:  # the split is the parameters' own: held-out (family, bug kind) pairs
        records = generated_records(split, n, seed) if n else []
    else:
        records = load_records(opts["source"], opts["mirrors"], opts, problems)
        if problems and not records:
            raise SourceError(f"{opts['source']}: no row could be loaded ({len(problems)} refused); the first: {problems[0]}")
    chosen = [r for r in records if record_split(r, int(opts["eval_percent"])) == split
              and opts["difficulty"] in (None, r["difficulty"])]
    if opts["source"] not in (None, GENERATED) and n > 0:
        check_split(chosen, records, split, opts)
    settings = {key: opts[key] for key in ("arms", "arm_weights", "guard", "tool_format", "timeout_is_infra",
                                           "allow_weak_isolation")}
    return [Task(id=r["instance_id"], prompt=[{"role": "user", "content": r["problem_statement"]}], env="code",
                 payload={**r, **settings, "seed": seed}, metadata={"split": split, "repo": r["repo"], "difficulty": r["difficulty"],
                                               **({"difficulty_raw": r["difficulty_raw"]} if r.get("difficulty_raw") else {}),
                                               **({"bug_family": r["generated"]["family"], "bug_kind": r["generated"]["kind"]}
                                                  if "generated" in r else {})})
            for r in chosen[:n]]


def record_split(record: dict[str, Any], eval_percent: int) -> str:
    """A generated task's split is its parameters' (held-out combinations); any other's a hash of its id."""
    return record["generated"]["split"] if "generated" in record else split_of(record["instance_id"], eval_percent)


def check_options(opts: dict[str, Any]) -> None:
    arms, weights = opts["arms"], opts["arm_weights"]
    if not isinstance(arms, dict) or not arms:
        raise ValueError("code option arms must map arm names to tool lists, e.g. {bash: [bash, submit]}")
    unknown = sorted(set(weights) - set(arms))
    if unknown or not any(float(w) > 0 for w in weights.values()):
        raise ValueError(f"code option arm_weights must weigh arms from {sorted(arms)} with some weight > 0, got {weights}")
    if opts["tool_format"] not in ("hermes", "bash_block"):
        raise ValueError(f"code option tool_format must be 'hermes' or 'bash_block', got {opts['tool_format']!r}")
    if opts["tool_format"] == "bash_block" and any(set(arms[a]) - {"bash", "submit"} for a, w in weights.items() if float(w) > 0):
        raise ValueError("code option tool_format=bash_block needs bash-only arms; set arm_weights to {bash: 1}")
    if not 0 <= int(opts["eval_percent"]) <= 100:
        raise ValueError(f"code option eval_percent must be 0..100, got {opts['eval_percent']}")
    if opts["difficulty"] not in (None, "easy", "medium", "hard"):
        raise ValueError(f"code option difficulty must be easy, medium or hard, got {opts['difficulty']!r}")
