"""Code tasks: the built-in offline set, or rows users bring (SWE-bench style, the recipe's records).

A task's payload holds everything the environment and grader need, computed once on the host
from trusted data: how to build the base repository, the issue text, the test patch, the test
command and timeout, the reference fix, and `graded_files` (each path the test patch touches,
as it must read at grading: the base version with the test patch applied).

Built-in layout (rlyard/envs/code/builtin/):
    <repo>/repo/...                    the clean repository (the reference fix of every task)
    <repo>/tasks/<id>/task.yaml        problem_statement, difficulty, timeout_s
    <repo>/tasks/<id>/base/...         files that differ at the task's base commit (the bug)
    <repo>/tasks/<id>/tests/...        hidden tests: the repository's tests/ folder as the test patch leaves it
"""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from rlyard.envs.code.collect import collect_node_ids
from rlyard.envs.code.repo import apply_patch, make_patch, touched_paths
from rlyard.envs.splits import merge_options
from rlyard.sandbox import require_sealed
from rlyard.types import Task

BUILTIN = Path(__file__).with_name("builtin")
RUNNER_PATH = ".rlyard/grade.py"
RUNNER = Path(__file__).with_name("grade_runner.py").read_text()
ARMS = {"bash": ["bash", "submit"], "edit": ["read_file", "write_file", "edit_file", "grep", "glob", "submit"]}
DEFAULTS: dict[str, Any] = {
    "source": None,  # None = the built-in set; else a .jsonl / .json / .parquet file or a `datasets` folder
    "mirrors": None,  # folder of local git mirrors (SWE-bench rows) / root of relative working dirs
    "arms": ARMS,  # harness arms: name -> tool names
    "arm_weights": {"bash": 0.5, "edit": 0.5},  # how often each arm is drawn (a whole group shares one)
    "guard": True,  # answer "Permission denied" to reads of hidden tests, git history, URL installs
    "tool_format": "hermes",  # or bash_block (bash-only arms)
    "eval_percent": 25,  # share of tasks (stable hash of the id) in the eval split; 100 = all
    "timeout_is_infra": True,  # a test command that times out: infra failure (True) or reward 0
    "difficulty": None,  # keep only "easy" | "medium" | "hard"
    "allow_weak_isolation": False,  # run without bubblewrap (the sandbox could then read hidden tests)
    "dataset_split": None,  # the split of a DatasetDict folder to read (needed when it has several)
    "wheels": None,  # a local wheel folder for the per-repository venvs (pip --no-index --find-links)
    "build_venvs": True,  # build a cached venv per repository for SWE-bench rows that need packages
}


def split_of(instance_id: str, eval_percent: int) -> str:
    digest = hashlib.sha256(f"rlyard/code/{instance_id}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") % 100 < eval_percent else "train"


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
            overlay = read_tree(task_dir / "base") if (task_dir / "base").is_dir() else {}
            stray = sorted(set(overlay) - set(clean))
            if stray:
                raise ValueError(f"{task_dir}/base: {stray} are not files of {repo_dir.name}/repo")
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


TEST_DIRS = ("tests", "test", "testing")


def trusted_test_paths(test_files: list[str], listing: list[str]) -> list[str]:
    """Paths reset to their trusted version at grading besides the test files themselves.

    The policy must not change what the hidden tests import or which fixtures they get: the
    `conftest.py` of every folder above a test file (absent ones stay absent), and every Python
    file of the test folder (`tests/`, `test/`, `testing/`) that holds it. `listing`: the base tree.
    """
    out: list[str] = []
    for path in test_files:
        parts = PurePosixPath(path).parts[:-1]
        out += ["/".join([*parts[:i], "conftest.py"]) for i in range(len(parts) + 1)]
        top = next((i for i, part in enumerate(parts) if part in TEST_DIRS), None)
        if top is not None:
            prefix = "/".join(parts[:top + 1]) + "/"
            out += [p for p in listing if p.startswith(prefix) and p.endswith(".py")]
    return [p for p in dict.fromkeys(out) if p not in test_files]


def runner_command(tests: list[str], python: str = "python3") -> str:
    """The verifier command over test files / node ids; `python` may be a per-repository venv's."""
    return f"{python} -I {RUNNER_PATH} " + " ".join(shell_quote(t) for t in tests)


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def payload(*, instance_id: str, repo: str, source: dict, problem_statement: str, test_patch: str, patch: str,
            test_command: str, timeout_s: float, base_files: dict[str, str | None], difficulty: str = "",
            extra_reset: list[str] = (), expected_tests: list[str] | None = None, xfail_ok: list[str] = (),
            ro_binds: list[str] = ()) -> dict[str, Any]:
    """A task payload with `graded_files` worked out: the test patch applied to the base versions,
    plus `extra_reset` paths kept at their base version (visible tests, the files of PASS_TO_PASS).

    `expected_tests`: the exact node ids that must each be reported passed (None: not a runner
    command, the exit code decides); `xfail_ok`: those that may be xfailed instead (SWE-bench's
    PASS_TO_PASS); `ro_binds`: host folders the sandbox sees read-only (a per-repository venv).
    """
    hidden = touched_paths(test_patch)
    graded = apply_patch(base_files, test_patch)
    graded |= {p: base_files[p] for p in extra_reset if p not in graded}
    return {"instance_id": instance_id, "repo": repo, "source": source, "problem_statement": problem_statement,
            "test_patch": test_patch, "patch": patch, "test_command": test_command, "timeout_s": timeout_s,
            "hidden_paths": hidden, "graded_files": graded, "difficulty": difficulty,
            "expected_tests": None if expected_tests is None else list(expected_tests), "xfail_ok": list(xfail_ok),
            "ro_binds": list(ro_binds)}


def make_tasks(split: str, n: int, seed: int, **options: Any) -> list[Task]:
    opts = merge_options("code", split, n, options, DEFAULTS)
    check_options(opts)
    require_sealed(bool(opts["allow_weak_isolation"]), "the code family (its tasks hold hidden tests and reference fixes)")
    if opts["source"] is None:
        records = builtin_records()
    else:
        from rlyard.envs.code.loaders import check_split, load_records

        records = load_records(opts["source"], opts["mirrors"], opts)
    chosen = [r for r in records if split_of(r["instance_id"], int(opts["eval_percent"])) == split
              and opts["difficulty"] in (None, r["difficulty"])]
    if opts["source"] is not None and n > 0:
        check_split(chosen, records, split, opts)
    settings = {key: opts[key] for key in ("arms", "arm_weights", "guard", "tool_format", "timeout_is_infra",
                                           "allow_weak_isolation")}
    return [Task(id=r["instance_id"], prompt=[{"role": "user", "content": r["problem_statement"]}], env="code",
                 payload={**r, **settings, "seed": seed}, metadata={"split": split, "repo": r["repo"], "difficulty": r["difficulty"],
                                               **({"difficulty_raw": r["difficulty_raw"]} if r.get("difficulty_raw") else {})})
            for r in chosen[:n]]


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
