"""Loading code tasks from the formats users bring, with real git mirrors and working dirs."""
import json
import subprocess

import pytest

from rlyard.envs.code.loaders import RowError, load_records
from rlyard.envs.code.repo import GIT_ENV, make_patch
from rlyard.envs.code.tasks import make_tasks
from rlyard.envs.code.validate import check_task

BUGGY = "def double(x):\n    return x + x + 1\n"
FIXED = "def double(x):\n    return x + x\n"
TEST = "from calc import double\n\n\ndef test_double():\n    assert double(4) == 8\n"


def sh(*args, cwd):
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True, env={**GIT_ENV, "PATH": "/usr/bin:/bin"}).stdout.strip()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """owner/calc: a base commit with the bug, then the fix commit (which must never reach the agent)."""
    root = tmp_path_factory.mktemp("mirrors")
    repo = root / "owner__calc"
    repo.mkdir()
    sh("git", "init", "-q", "-b", "main", cwd=repo)
    (repo / "calc.py").write_text(BUGGY)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_smoke.py").write_text("def test_smoke():\n    assert True\n")
    sh("git", "add", "-A", cwd=repo)
    sh("git", "commit", "-q", "-m", "base", cwd=repo)
    base = sh("git", "rev-parse", "HEAD", cwd=repo)
    (repo / "calc.py").write_text(FIXED)
    sh("git", "commit", "-q", "-am", "fix double", cwd=repo)
    return root, base


def swebench_row(base, **changes):
    row = {"instance_id": "owner__calc-1", "repo": "owner/calc", "base_commit": base, "problem_statement": "double(4) is 9",
           "patch": make_patch({"calc.py": BUGGY}, {"calc.py": FIXED}),
           "test_patch": make_patch({"tests/test_double.py": None}, {"tests/test_double.py": TEST}),
           "FAIL_TO_PASS": json.dumps(["tests/test_double.py::test_double"]), "PASS_TO_PASS": ["tests/test_smoke.py::test_smoke"]}
    return {**row, **changes}


def test_swebench_rows_from_jsonl_parquet_and_a_datasets_folder_give_sound_tasks(mirror, tmp_path):
    root, base = mirror
    rows = [swebench_row(base)]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "rows_ds"))
    for source in ("rows.jsonl", "rows.parquet", "rows_ds"):
        [record] = load_records(tmp_path / source, root)
        assert record["source"] == {"mirror": str(root / "owner__calc"), "base_commit": base}
        assert record["hidden_paths"] == ["tests/test_double.py", ".rlyard/grade.py"]
        assert "tests/test_double.py::test_double" in record["test_command"]
    [task] = make_tasks("eval", 5, 0, source=str(tmp_path / "rows.jsonl"), mirrors=str(root), eval_percent=100)
    check = check_task(task, arms=("bash",))
    assert check.ok, check.error  # fails at the base, passes with the row's patch, in the sandbox


def test_the_workspace_of_a_mirror_task_has_no_history_past_the_base(mirror, tmp_path):
    from rlyard.envs.code.env import CodeEnv

    root, base = mirror
    (tmp_path / "rows.jsonl").write_text(json.dumps(swebench_row(base)) + "\n")
    [task] = make_tasks("eval", 5, 0, source=str(tmp_path / "rows.jsonl"), mirrors=str(root), eval_percent=100, guard=False)
    env = CodeEnv()
    try:
        env.reset(task)
        out = env.step('<tool_call>{"name": "bash", "arguments": {"command": "git log --all --oneline; git grep -c \'x + x$\' $(git rev-list --all) || true"}}</tool_call>')
        text = out.messages[0]["content"]
        assert "fix double" not in text and text.count(" base") == 1
        assert (env.workspace / "calc.py").read_text() == BUGGY
    finally:
        env.close()


@pytest.mark.parametrize("change, message", [
    ({"test_patch": None}, "row 2: missing field 'test_patch'"),
    ({"FAIL_TO_PASS": "not json"}, "row 2: field 'FAIL_TO_PASS' must be a list"),
    ({"FAIL_TO_PASS": []}, "row 2: field 'FAIL_TO_PASS' is empty"),
    ({"repo": "nobody/missing"}, "row 2: no local mirror of 'nobody/missing'"),
    ({"base_commit": "0" * 40}, "row 2: git cat-file"),
])
def test_a_bad_swebench_row_is_named_by_number_and_field(mirror, tmp_path, change, message):
    root, base = mirror
    rows = [swebench_row(base), {k: v for k, v in swebench_row(base, **change).items() if v is not None}]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(RowError, match=message.replace("(", r"\(")):
        load_records(tmp_path / "rows.jsonl", root)


def recipe_row(workdir, **changes):
    row = {"image": "registry/calc:latest", "workdir": str(workdir), "instance_id": "calc-recipe-1", "problem_statement": "double is off by one",
           "test_patch": make_patch({"tests/test_double.py": None}, {"tests/test_double.py": TEST}),
           "test_command": "python3 -m pytest -q -p no:cacheprovider tests/test_double.py", "timeout": 60,
           "patch": make_patch({"calc.py": BUGGY}, {"calc.py": FIXED})}
    return {**row, **changes}


def test_recipe_records_load_and_grade_from_a_working_dir(tmp_path):
    workdir = tmp_path / "calc"
    workdir.mkdir()
    (workdir / "calc.py").write_text(BUGGY)
    (tmp_path / "rows.json").write_text(json.dumps([recipe_row("calc")]))  # relative: next to the data file
    [record] = load_records(tmp_path / "rows.json")
    assert record["source"]["image"] == "registry/calc:latest" and record["timeout_s"] == 60.0
    [task] = make_tasks("eval", 5, 0, source=str(tmp_path / "rows.json"), eval_percent=100)
    check = check_task(task, arms=("bash",))
    assert check.ok, check.error


def test_a_working_dir_whose_history_reaches_past_the_base_is_refused(mirror, tmp_path):
    root, base = mirror
    row = recipe_row(root / "owner__calc", base_commit=base)  # the mirror holds the fix commit after base
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(RowError, match="row 1: field 'workdir': .* has history past the base commit"):
        load_records(tmp_path / "rows.jsonl")


@pytest.mark.parametrize("change, message", [
    ({"test_command": ""}, "row 1: missing field 'test_command'"),
    ({"timeout": "soon"}, "row 1: field 'timeout' must be a number"),
    ({"workdir": "/nonexistent/dir"}, "row 1: field 'workdir': /nonexistent/dir is not a directory"),
])
def test_a_bad_recipe_row_is_named(tmp_path, change, message):
    (tmp_path / "calc").mkdir()
    (tmp_path / "rows.jsonl").write_text(json.dumps({**recipe_row(tmp_path / "calc"), **change}) + "\n")
    with pytest.raises(RowError, match=message):
        load_records(tmp_path / "rows.jsonl")
