"""Loading code tasks from the formats users bring, with real git mirrors and working dirs.

The second half builds small git repositories of each layout real projects use (a flat module,
`src/`, tests inside the package, conftest.py fixtures, a pytest.ini of its own, a same-named
package installed in the row's venv), turns a bug-fix commit of each into a SWE-bench row the
way SWE-bench does (`row_from_commit`), and proves through `validate` that every one scores 0
at its base and 1 with its gold patch, in the sandbox.
"""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlyard.envs.code.loaders import RowError, SourceError, check_split, load_records, row_from_commit
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
        assert record["expected_tests"] == ["tests/test_double.py::test_double", "tests/test_smoke.py::test_smoke"]
        assert record["xfail_ok"] == ["tests/test_smoke.py::test_smoke"]
        assert record["graded_files"]["tests/test_smoke.py"] == "def test_smoke():\n    assert True\n"  # reset at grading
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
    ({"base_commit": "0" * 40}, "row 2: field 'base_commit': 0000000000000000000000000000000000000000 is not a commit"),
    ({"FAIL_TO_PASS": ["test_double (tests.test_double.DoubleTest)"]}, "row 2: field 'FAIL_TO_PASS': 'test_double .* is not a pytest node id"),
    ({"PASS_TO_PASS": ["test_smoke"]}, "row 2: field 'PASS_TO_PASS': 'test_smoke' is not a pytest node id"),
    ({"patch": "--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-x\n+y\n"}, "row 2: field 'patch' is not a git-style patch"),
    ({"patch": make_patch({"calc.py": "nothing like it\n"}, {"calc.py": FIXED})}, "row 2: field 'patch' does not apply at the base commit"),
    ({"PASS_TO_PASS": ["tests/test_gone.py::test_x"]}, "row 2: test file.s. tests/test_gone.py of FAIL_TO_PASS / PASS_TO_PASS are neither"),
    ({"timeout": 0}, "row 2: field 'timeout' must be a positive number of seconds, got 0"),
    ({"timeout": -5}, "row 2: field 'timeout' must be a positive number"),
    ({"timeout": True}, "row 2: field 'timeout' must be a number of seconds"),
    ({"difficulty": "someday"}, "row 2: field 'difficulty': 'someday' is not one of"),
])
def test_a_bad_swebench_row_is_named_by_number_and_field(mirror, tmp_path, change, message):
    root, base = mirror
    rows = [swebench_row(base), {k: v for k, v in swebench_row(base, **change).items() if v is not None}]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(RowError, match=message.replace("(", r"\(")) as caught:
        load_records(tmp_path / "rows.jsonl", root)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(f"{tmp_path / 'rows.jsonl'}: row 2: ")


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


# ------------------------------------------------------------------ layouts of real projects


def commit_files(repo: Path, files: dict, message: str) -> str:
    for path, text in files.items():
        target = repo / path
        if text is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(textwrap.dedent(text))
    sh("git", "add", "-A", cwd=repo)
    sh("git", "commit", "-q", "-m", message, cwd=repo)
    return sh("git", "rev-parse", "HEAD", cwd=repo)


def make_mirror(root: Path, repo: str, base: dict, fix: dict, message: str) -> str:
    """A repository with a base commit, then a bug-fix commit (code + tests); returns the fix."""
    folder = root / repo.replace("/", "__")
    folder.mkdir()
    sh("git", "init", "-q", "-b", "main", cwd=folder)
    commit_files(folder, base, "base")
    return commit_files(folder, fix, message)


# Each layout: base files, the fix commit's files, FAIL_TO_PASS, PASS_TO_PASS.
LAYOUTS = {
    "owner/flatmod": (  # a flat module at the root; an xfail test in PASS_TO_PASS; a P2P file the fix does not touch
        {"flatmod.py": "def clamp(x, lo, hi):\n    return max(lo, x)\n",
         "tests/test_flatmod.py": """\
            import pytest
            from flatmod import clamp

            def test_low():
                assert clamp(-1, 0, 9) == 0

            @pytest.mark.xfail(reason="floats are not handled yet")
            def test_floats():
                assert clamp(0.5, 0, 1) == "half"
            """,
         "tests/test_other.py": "def test_other():\n    assert 1 + 1 == 2\n"},
        {"flatmod.py": "def clamp(x, lo, hi):\n    return min(hi, max(lo, x))\n",
         "tests/test_flatmod.py": """\
            import pytest
            from flatmod import clamp

            def test_low():
                assert clamp(-1, 0, 9) == 0

            @pytest.mark.xfail(reason="floats are not handled yet")
            def test_floats():
                assert clamp(0.5, 0, 1) == "half"

            def test_high():
                assert clamp(12, 0, 9) == 9
            """},
        ["tests/test_flatmod.py::test_high"],
        ["tests/test_flatmod.py::test_low", "tests/test_flatmod.py::test_floats", "tests/test_other.py::test_other"]),
    "owner/srclay": (  # src/ layout: the package is importable only from src/
        {"pyproject.toml": "[project]\nname = \"srclay\"\nversion = \"0.1\"\n",
         "src/srclay/__init__.py": "from srclay.core import slug\n",
         "src/srclay/core.py": "def slug(text):\n    return text.lower()\n",
         "tests/test_slug.py": "from srclay import slug\n\ndef test_lower():\n    assert slug('AB') == 'ab'\n"},
        {"src/srclay/core.py": "def slug(text):\n    return '-'.join(text.lower().split())\n",
         "tests/test_slug.py": "from srclay import slug\n\ndef test_lower():\n    assert slug('AB') == 'ab'\n\n"
                               "def test_spaces():\n    assert slug('A  b c') == 'a-b-c'\n"},
        ["tests/test_slug.py::test_spaces"], ["tests/test_slug.py::test_lower"]),
    "owner/inpkg": (  # tests inside the package (inpkg/tests/__init__.py), a test class
        {"inpkg/__init__.py": "", "inpkg/stack.py": "class Stack(list):\n    def peek(self):\n        return self[0]\n",
         "inpkg/tests/__init__.py": "",
         "inpkg/tests/test_stack.py": "from inpkg.stack import Stack\n\nclass TestStack:\n"
                                      "    def test_empty(self):\n        assert Stack() == []\n"},
        {"inpkg/stack.py": "class Stack(list):\n    def peek(self):\n        return self[-1]\n",
         "inpkg/tests/test_stack.py": "from inpkg.stack import Stack\n\nclass TestStack:\n"
                                      "    def test_empty(self):\n        assert Stack() == []\n\n"
                                      "    def test_peek(self):\n        assert Stack([1, 2]).peek() == 2\n"},
        ["inpkg/tests/test_stack.py::TestStack::test_peek"], ["inpkg/tests/test_stack.py::TestStack::test_empty"]),
    "owner/fixt": (  # fixtures from tests/conftest.py, parametrized ids
        {"fixt.py": "def total(xs):\n    return sum(xs[1:])\n",
         "tests/conftest.py": "import pytest\n\n@pytest.fixture\ndef numbers():\n    return [3, 1, 2]\n",
         "tests/test_fixt.py": "import pytest\nfrom fixt import total\n\n@pytest.mark.parametrize('n', [0, 1])\n"
                               "def test_empty(n):\n    assert total([0] * n) == 0\n"},
        {"fixt.py": "def total(xs):\n    return sum(xs)\n",
         "tests/test_fixt.py": "import pytest\nfrom fixt import total\n\n@pytest.mark.parametrize('n', [0, 1])\n"
                               "def test_empty(n):\n    assert total([0] * n) == 0\n\ndef test_total(numbers):\n    assert total(numbers) == 6\n"},
        ["tests/test_fixt.py::test_total"], ["tests/test_fixt.py::test_empty[0]", "tests/test_fixt.py::test_empty[1]"]),
    "owner/inicfg": (  # a pytest.ini of its own: tests are check_*.py files with check_* functions
        {"pytest.ini": "[pytest]\npython_files = check_*.py\npython_functions = check_*\n",
         "inicfg.py": "def is_even(n):\n    return n % 2 == 1\n",
         "tests/check_parity.py": "from inicfg import is_even\n\ndef check_type():\n    assert isinstance(is_even(2), bool)\n"},
        {"inicfg.py": "def is_even(n):\n    return n % 2 == 0\n",
         "tests/check_parity.py": "from inicfg import is_even\n\ndef check_type():\n    assert isinstance(is_even(2), bool)\n\n"
                                  "def check_even():\n    assert is_even(4) and not is_even(3)\n"},
        ["tests/check_parity.py::check_even"], ["tests/check_parity.py::check_type"]),
}


@pytest.fixture(scope="module")
def layout_rows(tmp_path_factory):
    """One mirror per layout and the SWE-bench row of its fix commit, in rows.jsonl."""
    root = tmp_path_factory.mktemp("layouts")
    mirrors = root / "mirrors"
    mirrors.mkdir()
    rows = []
    for repo, (base, fix, fail, keep) in LAYOUTS.items():
        sha = make_mirror(mirrors, repo, base, fix, f"fix {repo}")
        rows.append(row_from_commit(mirrors / repo.replace("/", "__"), sha, fail, keep, repo=repo, timeout=200))
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "rows.jsonl", mirrors, rows


def test_row_from_commit_splits_a_fix_into_patch_and_test_patch(layout_rows):
    _, mirrors, rows = layout_rows
    row = rows[list(LAYOUTS).index("owner/fixt")]
    assert row["base_commit"] == sh("git", "rev-parse", "HEAD^", cwd=mirrors / "owner__fixt")
    assert "diff --git a/fixt.py b/fixt.py" in row["patch"] and "tests/" not in row["patch"]
    assert "diff --git a/tests/test_fixt.py b/tests/test_fixt.py" in row["test_patch"] and "fixt.py b/fixt.py" not in row["test_patch"]
    assert row["problem_statement"] == "fix owner/fixt"


def test_every_layout_validates_base_0_and_gold_1(layout_rows):
    """flat module, src/, tests inside the package, conftest fixtures, its own pytest.ini; an xfail
    PASS_TO_PASS test passes; timeout 200 s kept; through the loader, the env and the sandbox."""
    from rlyard.envs.code.validate import validate

    source, mirrors, _ = layout_rows
    records = load_records(source, mirrors)
    assert [r["timeout_s"] for r in records] == [200.0] * len(LAYOUTS)
    flat = records[0]
    assert flat["xfail_ok"] == LAYOUTS["owner/flatmod"][3] and flat["expected_tests"][0] == "tests/test_flatmod.py::test_high"
    assert flat["graded_files"]["tests/test_other.py"] == "def test_other():\n    assert 1 + 1 == 2\n"  # untouched P2P file: reset too
    assert all(r["test_command"].startswith("python3 -I .rlyard/grade.py ") and r["ro_binds"] == [] for r in records)
    checks = validate({"source": str(source), "mirrors": str(mirrors)}, jobs=2)
    assert {c.task_id: (c.base_reward, c.fixed_reward) for c in checks} == {r["instance_id"]: (0.0, 1.0) for r in records}, \
        "\n\n".join(f"{c.task_id}: {c.error}" for c in checks if not c.ok)


def test_a_timeout_of_200_s_reaches_the_sandbox_uncapped(layout_rows, monkeypatch):
    from rlyard.envs.code.env import CodeEnv
    from rlyard.sandbox import Sandbox

    source, mirrors, rows = layout_rows
    [task] = [t for t in make_tasks("eval", 99, 0, source=str(source), mirrors=str(mirrors), eval_percent=100)
              if t.id == rows[0]["instance_id"]]
    seen, real_run = [], Sandbox.run

    def spy(self, argv, *args, **kwargs):
        if argv[:2] == ["/bin/bash", "-c"] and "grade.py" in argv[2]:
            seen.append((kwargs.get("timeout_s"), self.limits.wall_s, getattr(kwargs.get("limits"), "wall_s", None)))
        return real_run(self, argv, *args, **kwargs)

    monkeypatch.setattr(Sandbox, "run", spy)
    env = CodeEnv()
    try:
        env.reset(task)
        env.score()
    finally:
        env.close()
    [(timeout_s, sandbox_wall, run_wall)] = seen
    assert timeout_s == 200.0 and max(sandbox_wall, run_wall or 0) >= 200.0, seen


# ------------------------------------------------------------------ a row's own venv


def build_wheel(tmp_path: Path, name: str, version: str, module: str, wheels: Path) -> None:
    project = tmp_path / f"wheel-src-{name}"
    (project / name).mkdir(parents=True)
    (project / name / "__init__.py").write_text(module)
    (project / "pyproject.toml").write_text(f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
                                            f'[project]\nname = "{name}"\nversion = "{version}"\n'
                                            f'[tool.setuptools]\npackages = ["{name}"]\n')
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(project)],
                   check=True, capture_output=True)


@pytest.fixture(scope="module")
def wheel_rows(tmp_path_factory):
    """owner/dupe needs `helper` (pyproject) and pins an old `dupe` release (requirements-test.txt):
    both come from a local wheel folder; the installed `dupe` must not shadow the workspace's."""
    root = tmp_path_factory.mktemp("venvrows")
    wheels, mirrors = root / "wheels", root / "mirrors"
    mirrors.mkdir()
    build_wheel(root, "helper", "1.0", "FORTY_TWO = 42\n", wheels)
    build_wheel(root, "dupe", "1.0", "def answer():\n    return 'the installed copy'\n", wheels)
    base = {"pyproject.toml": '[project]\nname = "dupe"\nversion = "2.0"\ndependencies = ["helper"]\n',
            "requirements-test.txt": "dupe==1.0  # the last release, for the compatibility tests\n",
            "dupe/__init__.py": "def answer():\n    return 41\n",
            "tests/test_dupe.py": "import dupe\n\ndef test_callable():\n    assert callable(dupe.answer)\n"}
    fix = {"dupe/__init__.py": "def answer():\n    return 42\n",
           "tests/test_dupe.py": "import dupe\nimport helper\n\ndef test_callable():\n    assert callable(dupe.answer)\n\n"
                                 "def test_answer():\n    assert dupe.answer() == helper.FORTY_TWO\n"}
    sha = make_mirror(mirrors, "owner/dupe", base, fix, "answer is off by one")
    row = row_from_commit(mirrors / "owner__dupe", sha, ["tests/test_dupe.py::test_answer"], ["tests/test_dupe.py::test_callable"],
                          repo="owner/dupe")
    (root / "rows.jsonl").write_text(json.dumps(row) + "\n")
    return root / "rows.jsonl", mirrors, wheels


def test_a_row_gets_its_own_venv_and_the_workspace_wins_over_an_installed_copy(wheel_rows, tmp_path, monkeypatch):
    from rlyard.envs.code.validate import validate
    from rlyard.sandbox import Sandbox
    import inspect

    source, mirrors, wheels = wheel_rows
    monkeypatch.setenv("RLYARD_CACHE", str(tmp_path / "cache"))
    [record] = load_records(source, mirrors, {"wheels": str(wheels)})
    [venv] = record["ro_binds"]
    assert venv.startswith(str(tmp_path / "cache" / "code-venvs" / "owner__dupe-"))
    assert record["test_command"].startswith(f"{venv}/bin/python -I .rlyard/grade.py ")
    show = "import dupe, helper; print(dupe.answer(), helper.FORTY_TWO)"
    assert subprocess.run([f"{venv}/bin/python", "-c", show], capture_output=True, text=True, cwd="/").stdout.split() == \
        ["the", "installed", "copy", "42"]  # outside the workspace, the venv's own copy is what imports
    if "ro_binds" not in inspect.signature(Sandbox).parameters:
        pytest.skip("Sandbox(..., ro_binds=...) has not landed yet: the venv is not visible in the sandbox")
    probe = Sandbox(tmp_path, ro_binds=(venv,)).run(["/bin/sh", "-c", f"{venv}/bin/python -c 'print(42)'"], timeout_s=30)
    if probe.text.strip() != "42":  # bwrap makes the missing parents of a bind target 0700: the uid cannot enter
        pytest.xfail(f"the sandbox cannot run the venv it binds read-only: {probe.text.strip()[:200]}")
    [check] = validate({"source": str(source), "mirrors": str(mirrors), "wheels": str(wheels)})
    assert (check.base_reward, check.fixed_reward) == (0.0, 1.0), check.error


def test_the_venv_is_built_once_and_reused(wheel_rows, tmp_path, monkeypatch):
    from rlyard.envs.code import venvs

    _, _, wheels = wheel_rows
    monkeypatch.setenv("RLYARD_CACHE", str(tmp_path / "cache"))
    first = venvs.ensure_venv("owner__x", ["helper"], wheels)
    stamp = (first / venvs.MARKER).stat().st_mtime_ns
    assert venvs.ensure_venv("owner__x", ["helper "], wheels) == first and (first / venvs.MARKER).stat().st_mtime_ns == stamp
    assert (first / "bin" / "python").resolve() == Path(venvs.SANDBOX_PYTHON).resolve()
    assert "include-system-site-packages = true" in (first / "pyvenv.cfg").read_text()
    assert [p.name for p in first.parent.iterdir() if ".tmp-" in p.name] == []
    with pytest.raises(venvs.VenvError, match="pip install nosuchpkg .* failed"):
        venvs.ensure_venv("owner__y", ["nosuchpkg"], wheels)
    assert not any(p.name.startswith("owner__y") and p.is_dir() for p in first.parent.iterdir())


def test_dependencies_come_from_the_row_else_the_repository_metadata():
    from rlyard.envs.code import venvs

    files = {
        "pyproject.toml": '[project]\nname = "p"\ndependencies = ["attrs>=20"]\n[project.optional-dependencies]\n'
                          'test = ["hypothesis"]\ndocs = ["sphinx"]\n',
        "setup.cfg": "[options]\ninstall_requires =\n    six\n[options.extras_require]\ntesting = mock\n",
        "setup.py": "from setuptools import setup\nsetup(name='p', install_requires=['idna'] + [], extras_require={'tests': ['toml']})\n",
        "requirements.txt": "# pinned\nrequests==2.0 ; python_version > '3'\n-e .\n-r requirements-extra.txt\n",
        "requirements-extra.txt": "tomli\ngit+https://example.com/x.git\n",
        "requirements-docs.txt": "sphinx\n",
    }
    deps, where = venvs.repo_requirements(files.get, sorted(files))
    assert deps == ["attrs>=20", "hypothesis", "six", "mock", "idna", "toml", "tomli", "requests==2.0 ; python_version > '3'", "tomli"]
    # setup.py is read with ast, never run: `['idna'] + []` and its test extra are followed
    assert where == "pyproject.toml, setup.cfg, setup.py, requirements-extra.txt, requirements.txt"
    assert venvs.setup_py_requirements("setup(install_requires=['idna'], extras_require={'test': ['toml']})") == ["idna", "toml"]
    assert venvs.row_requirements({"install": "pip install -e . && python -m pip install numpy==1.26 -r requirements.txt"}, files.get) == \
        (["numpy==1.26", "requests==2.0 ; python_version > '3'", "tomli"], "field 'install'")
    assert venvs.row_requirements({"pip_packages": "a b==2"}, files.get) == (["a", "b==2"], "field 'pip_packages'")
    assert venvs.row_requirements({"requirements": "x\ny\n"}, files.get) == (["x", "y"], "field 'requirements'")
    assert venvs.row_requirements({"pip_packages": []}, files.get) == ([], "field 'pip_packages' (empty)")  # no venv, metadata unread
    assert venvs.row_requirements({}, files.get) is None
    for bad in ("python setup.py develop", "pip install --index-url http://evil x", "pip install -e git+https://x/y"):
        with pytest.raises(venvs.VenvError):
            venvs.install_command(bad, files.get)


# ------------------------------------------------------------------ sources, splits and messages


def test_datasetdict_folders_need_a_split_when_they_hold_several(mirror, tmp_path, monkeypatch):
    import datasets

    root, base = mirror
    rows = [swebench_row(base)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"dev": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "two"))
    assert len(load_records(tmp_path / "one", root)) == 1
    with pytest.raises(RowError, match=r"a DatasetDict with splits dev, test; choose one with option dataset_split"):
        load_records(tmp_path / "two", root)
    with pytest.raises(RowError, match=r"dataset_split='train' is not a split of this DatasetDict; its splits: dev, test"):
        load_records(tmp_path / "two", root, {"dataset_split": "train"})
    [task] = make_tasks("eval", 5, 0, source=str(tmp_path / "two"), mirrors=str(root), eval_percent=100, dataset_split="test")
    assert task.id == "owner__calc-1"


def test_swebench_verified_difficulty_strings_map_to_the_filter_values(mirror, tmp_path):
    root, base = mirror
    spelt = ["<15 min fix", "15 min - 1 hour", "1-4 hours", ">4 hours"]
    rows = [swebench_row(base, instance_id=f"calc-{i}", difficulty=d) for i, d in enumerate(spelt)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = load_records(tmp_path / "rows.jsonl", root)
    assert [(r["difficulty"], r["difficulty_raw"]) for r in records] == list(zip(["easy", "medium", "hard", "hard"], spelt))
    easy = make_tasks("eval", 9, 0, source=str(tmp_path / "rows.jsonl"), mirrors=str(root), eval_percent=100, difficulty="easy")
    assert [t.id for t in easy] == ["calc-0"] and easy[0].payload["difficulty_raw"] == "<15 min fix"


def train_only_ids(count: int) -> list[str]:
    from rlyard.envs.code.payload import split_of

    return [f"calc-{i}" for i in range(100) if split_of(f"calc-{i}", 25) == "train"][:count]


def test_a_split_with_no_task_is_named_with_the_row_count_and_the_option(mirror, tmp_path, capsys):
    from rlyard.cli import main
    from rlyard.envs.code.tasks import DEFAULTS

    root, base = mirror
    rows = [swebench_row(base, instance_id=i) for i in train_only_ids(3)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    opts = {**DEFAULTS, "source": str(tmp_path / "rows.jsonl"), "mirrors": str(root)}
    records = load_records(opts["source"], root)
    with pytest.raises(SourceError) as caught:
        check_split([], records, "eval", opts)
    assert str(caught.value) == (f"{tmp_path / 'rows.jsonl'}: no tasks in split eval (3 rows loaded; eval_percent=25 put none there; "
                                 "try a larger -o eval_percent=...)")
    check_split(records, records, "train", opts)  # a split with tasks passes
    check_split([], [], "eval", {**opts, "source": None})  # the built-in set is not checked here
    with pytest.raises(SourceError, match=r"difficulty=hard kept none \(their difficulties: none\)"):
        check_split([], records, "train", {**opts, "difficulty": "hard"})
    assert main(["envs", "show", "code", "-o", f"source={opts['source']}", "-o", f"mirrors={root}"]) != 0
    out, err = capsys.readouterr()
    assert out == "" and err.strip().endswith("no tasks in split eval (3 rows loaded; eval_percent=25 put none there; "
                                              "try a larger -o eval_percent=...)")


@pytest.mark.parametrize("action", ["show", "validate"])
def test_the_cli_prints_a_bad_row_as_one_line_and_exits_2(mirror, tmp_path, capsys, action):
    from rlyard.cli import main

    root, base = mirror
    rows = [swebench_row(base), swebench_row(base, instance_id="x-2", FAIL_TO_PASS=["test_double (tests.DoubleTest)"])]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["envs", action, "code", "-o", f"source={tmp_path / 'rows.jsonl'}", "-o", f"mirrors={root}"]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith(f"rlyard: {tmp_path / 'rows.jsonl'}: row 2: field 'FAIL_TO_PASS': "), err


def test_validate_shows_the_real_error_of_the_grader(mirror, tmp_path):
    """A missing dependency: the ModuleNotFoundError at collection is in the report, not cut off."""
    from rlyard.envs.code.validate import validate

    root, base = mirror
    test = "import nosuchdependency\nfrom calc import double\n\n\ndef test_double():\n    assert double(4) == 8\n"
    row = swebench_row(base, test_patch=make_patch({"tests/test_double.py": None}, {"tests/test_double.py": test}))
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    [check] = validate({"source": str(tmp_path / "rows.jsonl"), "mirrors": str(root)})
    assert not check.ok and "ModuleNotFoundError: No module named 'nosuchdependency'" in check.error, check.error


def test_a_recipe_test_command_keeps_its_pythonpath(tmp_path):
    """The module lives in lib/; only the command's own PYTHONPATH=lib makes it importable."""
    from rlyard.envs.code.validate import validate

    workdir = tmp_path / "calc"
    (workdir / "lib").mkdir(parents=True)
    (workdir / "lib" / "calc.py").write_text(BUGGY)
    row = recipe_row("calc", test_command="PYTHONPATH=lib python3 -m pytest -q -p no:cacheprovider tests/test_double.py",
                     patch=make_patch({"lib/calc.py": BUGGY}, {"lib/calc.py": FIXED}), timeout=200)
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    [check] = validate({"source": str(tmp_path / "rows.jsonl")})
    assert (check.base_reward, check.fixed_reward) == (0.0, 1.0), check.error


def test_export_commit_without_tarfiles_data_filter(tmp_path, monkeypatch):
    """Debian 12's Python 3.11.2 has no `extractall(filter=...)`: the same refusals by hand."""
    import io
    import subprocess
    import tarfile

    from rlyard.envs.code import repo

    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    mirror = tmp_path / "mirror"
    (mirror / "pkg").mkdir(parents=True)
    (mirror / "pkg" / "a.py").write_text("x = 1\n")
    (mirror / "link.py").symlink_to("pkg/a.py")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c"]):
        subprocess.run(["git", *args], cwd=mirror, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=mirror, capture_output=True, text=True, check=True).stdout.strip()
    repo.export_commit(mirror, head, tmp_path / "out")
    assert (tmp_path / "out" / "pkg" / "a.py").read_text() == "x = 1\n" and (tmp_path / "out" / "link.py").is_symlink()
    for name, kind, link in (("../evil", tarfile.REGTYPE, ""), ("/abs", tarfile.REGTYPE, ""), ("out", tarfile.SYMTYPE, "/etc/passwd"),
                             ("dev", tarfile.CHRTYPE, "")):
        member = tarfile.TarInfo(name)
        member.type, member.linkname = kind, link
        with pytest.raises(repo.RepoError):
            repo._data_member(member, tmp_path / "out")
