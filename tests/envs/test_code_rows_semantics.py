"""SWE-bench semantics for a user's rows (issue 35's real-row classes), on small git mirrors.

Each class, with several variants:
- requirement files: per-Python-version and per-tool files are not merged into one install;
  two pins that cannot both hold are refused naming both files (never merged silently);
- a row that cannot load is reported with its reason, and the other rows still load and validate;
- the repository is installed where its version module is written at build time, or the row
  installs it (`pip install -e .`): the generated file reaches the workspace, metadata exists;
- a mirror laid as `<owner>/<name>.git` beside the owner's other folders is found (owner == name);
- requirements named by variables of setup.py, or only in tests/requirements.txt, are found, and
  `install: pip install -e .` still brings the test tools.
Packages come from a wheel folder the test builds (pip --no-index): no network.
"""
from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from rlyard.envs.code import venvs
from rlyard.envs.code.loaders import RowError, RowLoadError, load_records, row_from_commit
from rlyard.envs.code.repo import GIT_ENV

# a PEP 517 backend kept in the repository (no build dependency to fetch) that, like
# setuptools-scm's `version_file` or hatch-vcs's build hook, writes the version module into
# the tree while building; the package cannot be imported without it
BACKEND = '''\
import base64, hashlib, os, pathlib, zipfile

NAME, VERSION = "{name}", "{version}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    pathlib.Path(NAME, "_version.py").write_text(f"version = {{VERSION!r}}\\n")
    wheel = f"{{NAME}}-{{VERSION}}-py3-none-any.whl"
    info = f"{{NAME}}-{{VERSION}}.dist-info"
    files = {{p.as_posix(): p.read_bytes() for p in pathlib.Path(NAME).rglob("*.py")}}
    files[f"{{info}}/METADATA"] = f"Metadata-Version: 2.1\\nName: {{NAME}}\\nVersion: {{VERSION}}\\n".encode()
    files[f"{{info}}/WHEEL"] = b"Wheel-Version: 1.0\\nGenerator: rlyard-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as out:
        for path, data in files.items():
            out.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{{path}},sha256={{digest}},{{len(data)}}")
        out.writestr(f"{{info}}/RECORD", "\\n".join(record + [f"{{info}}/RECORD,,"]) + "\\n")
    return wheel
'''


def sh(*args, cwd):
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True, env={**GIT_ENV, "PATH": "/usr/bin:/bin"}).stdout.strip()


def make_mirror(folder: Path, base: dict, fix: dict, message: str = "fix") -> str:
    """A repository with a base commit, then a bug-fix commit; returns the fix's sha."""
    folder.mkdir(parents=True)
    sh("git", "init", "-q", "-b", "main", cwd=folder)
    for files, text in ((base, "base"), (fix, message)):
        for path, content in files.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(textwrap.dedent(content))
        sh("git", "add", "-A", cwd=folder)
        sh("git", "commit", "-q", "-m", text, cwd=folder)
    sh("git", "tag", "v1.4.0", "HEAD^", cwd=folder)
    return sh("git", "rev-parse", "HEAD", cwd=folder)


def build_wheel(name: str, version: str, wheels: Path) -> None:
    """A one-module wheel written directly (pip needs no build step to install it)."""
    import zipfile

    wheels.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n", f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: rlyard-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(wheels / f"{name}-{version}-py3-none-any.whl", "w") as out:
        for path, text in files.items():
            out.writestr(path, text)
        out.writestr(f"{info}/RECORD", "".join(f"{p},," + "\n" for p in [*files, f"{info}/RECORD"]))


def files_reader(files: dict):
    return lambda path: files.get(path)


PY = ".".join(venvs.python_version(venvs.SANDBOX_PYTHON).split()[0].split(".")[:2])
PY_TAG = PY.replace(".", "")


# ------------------------------------------------------------------ 1. which requirement files


@pytest.mark.parametrize("files, wanted, left_out", [
    # one file per Python version: only this interpreter's (and the plain one) are read
    ({"requirements.txt": "helper\n", "requirements-py38.txt": "helper==0.9\n", f"requirements-py{PY_TAG}.txt": "helper==1.0\n",
      "requirements-py2.txt": "helper==0.1\n"}, ["helper", "helper==1.0"], "helper==0.9"),
    # a folder of pip-compile pins per tool: tests.txt, not dev (which includes docs and typing), docs, typing, build, min
    ({"requirements/tests.txt": "helper==1.0\n", "requirements/dev.txt": "-r docs.txt\n-r tests.txt\nhelper==1.0\ntox==4\n",
      "requirements/docs.txt": "sphinx==7.2\nhelper==0.8\n", "requirements/typing.txt": "mypy==1.9\n",
      "requirements/build.txt": "build==1.1\n", "requirements/tests-min.txt": "helper==0.5\n"}, ["helper==1.0"], "helper==0.8"),
    # root files per tool (docs, lint, mypy) are left out; a test file is read
    ({"requirements-docs.txt": "sphinx\n", "requirements-lint.txt": "flake8==3\n", "requirements-mypy.txt": "mypy\n",
      "requirements-test.txt": "helper==1.0\n"}, ["helper==1.0"], "flake8==3"),
    # a Python-versioned test file in requirements/ (tests37.txt vs tests<this>.txt)
    ({"requirements/tests37.txt": "helper==0.7\n", f"requirements/tests{PY_TAG}.txt": "helper==1.0\n"}, ["helper==1.0"], "helper==0.7"),
])
def test_requirement_files_for_other_pythons_and_tools_are_not_merged(files, wanted, left_out):
    deps, _ = venvs.repo_requirements(files_reader(files), sorted(files))
    assert sorted(deps) == sorted(wanted) and left_out not in deps, deps


@pytest.mark.parametrize("files, names", [
    ({"requirements.txt": "helper==1.0\n", "requirements-test.txt": "helper==2.0\n"}, ("requirements.txt", "requirements-test.txt")),
    ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["helper>=2"]\n', "requirements.txt": "helper==1.0\n"},
     ("pyproject.toml", "requirements.txt")),
    ({"requirements.txt": "-r requirements/base.txt\n", "requirements/base.txt": "Helper_Lib==1.0\n",
      "tests/requirements.txt": "helper-lib==1.1 ; python_version >= '3'\n"}, ("requirements", "tests/requirements.txt")),
])
def test_pins_that_cannot_both_hold_are_refused_naming_both_files(files, names):
    with pytest.raises(venvs.VenvError, match="conflicting requirements for helper") as caught:
        venvs.repo_requirements(files_reader(files), sorted(files))
    assert all(name in str(caught.value) for name in names), caught.value


def test_a_pin_whose_marker_is_false_here_is_not_a_conflict():
    files = {"requirements.txt": "helper==1.0\n", "requirements-dev.txt": "helper==0.1 ; python_version < '3'\n"}
    assert sorted(venvs.repo_requirements(files_reader(files), sorted(files))[0]) == ["helper==0.1 ; python_version < '3'", "helper==1.0"]


# ------------------------------------------------------------------ 5. setup.py variables, tests/requirements.txt, install -e .


@pytest.mark.parametrize("setup_py, wanted", [
    ("from setuptools import setup\nREQUIRES = ['helper>=1']\nsetup(name='p', install_requires=REQUIRES)\n", ["helper>=1"]),
    ("import setuptools\nBASE = ['helper']\nTESTS = BASE + ['pytest-mock']\nEXTRAS = {'tests': TESTS, 'docs': ['sphinx']}\n"
     "setuptools.setup(name='p', extras_require=EXTRAS)\n", ["helper", "pytest-mock"]),
    ("from setuptools import setup\nEXTRAS = {'lint': ['flake8']}\nEXTRAS['testing'] = ['freezegun']\n"
     "setup(name='p', tests_require=['helper'], extras_require=EXTRAS)\n", ["helper", "freezegun"]),
])
def test_setup_py_requirements_named_by_variables_are_found(setup_py, wanted):
    deps, where = venvs.repo_requirements(files_reader({"setup.py": setup_py}), ["setup.py"])
    assert deps == wanted and where == "setup.py"


def test_requirements_only_in_the_test_folder_and_install_e_dot_bring_the_test_tools():
    files = {"setup.py": "from setuptools import setup\nsetup(name='p', install_requires=['helper'])\n",
             "tests/requirements.txt": "pytest-mock\nfreezegun==1.4\n", "docs/requirements.txt": "sphinx\n"}
    listing = sorted(files)
    assert venvs.repo_requirements(files_reader(files), listing)[0] == ["helper", "pytest-mock", "freezegun==1.4"]
    plan = venvs.plan({"install": "pip install -e ."}, files_reader(files), listing)
    assert plan.requirements == ["helper", "pytest-mock", "freezegun==1.4"] and plan.install_repo
    plan = venvs.plan({"install": "python -m pip install -e '.[tests]' && pip install six", "pip_packages": ["mock"]},
                      files_reader(files), listing)
    assert plan.requirements == ["six", "mock", "helper", "pytest-mock", "freezegun==1.4"], plan
    assert venvs.plan({"pip_packages": []}, files_reader(files), listing).requirements == []  # said explicitly: nothing
    with pytest.raises(venvs.VenvError, match="field 'install_repo' must be true or false"):
        venvs.plan({"install_repo": "yes"}, files_reader(files), listing)


@pytest.mark.parametrize("pyproject, why", [
    ('[build-system]\nrequires = ["setuptools>=64", "setuptools_scm>=8"]\n', "setuptools_scm"),
    ('[build-system]\nrequires = ["hatchling", "hatch-vcs"]\n[tool.hatch.version]\nsource = "vcs"\n', "source = vcs"),
    ('[tool.setuptools_scm]\nversion_file = "src/p/_version.py"\n', "tool.setuptools_scm"),
    ('[build-system]\nrequires = ["flit_core"]\n', ""),
])
def test_a_version_written_from_git_at_build_time_asks_for_the_repository_installed(pyproject, why):
    plan = venvs.plan({}, files_reader({"pyproject.toml": pyproject}), ["pyproject.toml"])
    assert (why in plan.install_repo) if why else plan.install_repo == "", plan


# ------------------------------------------------------------------ 4. mirrors whose owner and name are equal


@pytest.mark.parametrize("laid_as, beside", [
    ("acme/acme.git", ["acme/acme-docs/README"]),  # <owner>/<name>.git: the owner folder is not the mirror
    ("acme/acme", ["acme/notes.txt"]),
    ("acme__acme.git", ["acme/plain-folder/x"]),  # an owner folder that is no git repository sits beside
])
def test_a_mirror_whose_owner_and_name_are_equal_is_found(tmp_path, laid_as, beside):
    mirrors = tmp_path / "mirrors"
    for path in beside:
        (mirrors / path).parent.mkdir(parents=True, exist_ok=True)
        (mirrors / path).write_text("not a repository\n")
    sha = make_mirror(mirrors / laid_as, {"acme.py": "X = 1\n", "tests/test_x.py": "def test_a():\n    assert True\n"},
                      {"acme.py": "X = 2\n", "tests/test_x.py": "import acme\n\ndef test_a():\n    assert True\n\n"
                                                                "def test_b():\n    assert acme.X == 2\n"})
    row = row_from_commit(mirrors / laid_as, sha, ["tests/test_x.py::test_b"], ["tests/test_x.py::test_a"], repo="acme/acme")
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    [record] = load_records(tmp_path / "rows.jsonl", mirrors, {"build_venvs": False})
    assert record["source"]["mirror"] == str(mirrors / laid_as)


def test_no_mirror_names_the_folders_that_are_not_git_repositories(tmp_path):
    mirrors = tmp_path / "mirrors"
    (mirrors / "acme" / "other").mkdir(parents=True)
    row = {"instance_id": "a-1", "repo": "acme/acme", "base_commit": "0" * 40, "problem_statement": "x",
           "patch": "diff --git a/a.py b/a.py\n", "test_patch": "diff --git a/t.py b/t.py\n", "FAIL_TO_PASS": ["t.py::t"], "PASS_TO_PASS": []}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(RowLoadError) as caught:
        load_records(tmp_path / "rows.jsonl", mirrors)
    message = str(caught.value)
    assert "no local mirror of 'acme/acme'" in message and f"{mirrors / 'acme'} is a folder but not a git repository" in message
    assert "base_commit" not in message


# ------------------------------------------------------------------ 2, 3 end to end: load, build, validate


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """Mirrors, rows and a wheel folder: good rows of each layout and rows that cannot load."""
    root = tmp_path_factory.mktemp("rowsem")
    mirrors, wheels = root / "mirrors", root / "wheels"
    for name, version in (("helper", "1.0"), ("helper", "2.0"), ("freezeg", "1.4")):
        build_wheel(name, version, wheels)
    out = {}

    def add(key, repo, base, fix, f2p, p2p, folder=None, **fields):
        sha = make_mirror(mirrors / (folder or repo.replace("/", "__")), base, fix, f"fix {key}")
        out[key] = row_from_commit(mirrors / (folder or repo.replace("/", "__")), sha, f2p, p2p, repo=repo, instance_id=key, **fields)

    test_ok = "def test_ok():\n    assert True\n"
    # a version module written by the build (setuptools-scm style), imported by the package
    scm = {"pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
                             '[project]\nname = "scmpkg"\ndynamic = ["version"]\ndependencies = ["helper==1.0"]\n'
                             '[tool.setuptools_scm]\nversion_file = "scmpkg/_version.py"\n',
           "backend.py": BACKEND.format(name="scmpkg", version="1.4.0"), ".gitignore": "scmpkg/_version.py\n",
           "scmpkg/__init__.py": "from scmpkg._version import version as __version__\n\ndef half(x):\n    return x // 2 + 1\n",
           "tests/test_half.py": "import scmpkg\n\n" + test_ok}
    add("scm-version", "owner/scmpkg", scm,
        {"scmpkg/__init__.py": "from scmpkg._version import version as __version__\n\ndef half(x):\n    return x // 2\n",
         "tests/test_half.py": "import helper, scmpkg\n\n" + test_ok + "\ndef test_half():\n    assert scmpkg.half(8) == 4 and helper.VERSION == '1.0'\n"},
        ["tests/test_half.py::test_half"], ["tests/test_half.py::test_ok"])
    # metadata only from the installed distribution (importlib.metadata), the row installs it: install -e .
    meta = {"pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
                              '[project]\nname = "metapkg"\ndynamic = ["version"]\n',
            "backend.py": BACKEND.format(name="metapkg", version="2.5"),
            "metapkg/__init__.py": "from importlib.metadata import version\n\n__version__ = version('metapkg')\n\ndef major():\n    return 3\n",
            "tests/requirements.txt": "freezeg==1.4\n", "tests/test_meta.py": "import metapkg\n\n" + test_ok}
    add("install-e-dot", "owner/metapkg", meta,
        {"metapkg/__init__.py": "from importlib.metadata import version\n\n__version__ = version('metapkg')\n\n"
                                "def major():\n    return int(__version__.split('.')[0])\n",
         "tests/test_meta.py": "import freezeg, metapkg\n\n" + test_ok + "\ndef test_major():\n    assert metapkg.major() == 2\n"},
        ["tests/test_meta.py::test_major"], ["tests/test_meta.py::test_ok"], install="pip install -e .")
    # per-Python and per-tool pinned files, setup.py variables; owner == name, laid as <owner>/<name>.git
    pins = {"setup.py": "from setuptools import setup\nTESTS = ['freezeg']\nsetup(name='pins', extras_require={'tests': TESTS})\n",
            "requirements-py38.txt": "helper==2.0\n", f"requirements-py{PY_TAG}.txt": "helper==1.0\n",
            "requirements-docs.txt": "sphinx-that-is-not-there==9.9\n",
            "pins.py": "import helper\n\ndef which():\n    return '2.0'\n", "tests/test_pins.py": test_ok}
    add("pins", "pins/pins", pins,
        {"pins.py": "import helper\n\ndef which():\n    return helper.VERSION\n",
         "tests/test_pins.py": "import freezeg, pins\n\n" + test_ok + "\ndef test_which():\n    assert pins.which() == '1.0'\n"},
        ["tests/test_pins.py::test_which"], ["tests/test_pins.py::test_ok"], folder="pins/pins.git")
    # rows that cannot load: conflicting pins, no mirror, a patch that does not apply
    clash = {"requirements.txt": "helper==1.0\n", "requirements-test.txt": "helper==2.0\n", "clash.py": "X = 1\n", "tests/test_c.py": test_ok}
    add("clash", "owner/clash", clash, {"clash.py": "X = 2\n", "tests/test_c.py": test_ok + "\ndef test_x():\n    import clash\n    assert clash.X == 2\n"},
        ["tests/test_c.py::test_x"], ["tests/test_c.py::test_ok"])
    out["no-mirror"] = {**out["clash"], "instance_id": "no-mirror", "repo": "nobody/missing"}
    out["stale-patch"] = {**out["clash"], "instance_id": "stale-patch", "patch": out["clash"]["patch"].replace("-X = 1", "-X = 7")}
    source = root / "rows.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in out.values()))
    return source, mirrors, wheels, out


def test_rows_that_cannot_load_are_reported_and_the_others_load(rows, tmp_path, monkeypatch, capsys):
    from rlyard.envs.code.tasks import make_tasks

    source, mirrors, wheels, _ = rows
    monkeypatch.setenv("RLYARD_CACHE", str(tmp_path / "cache"))
    only = tmp_path / "bad.jsonl"  # the three rows that cannot load, and one that does (no venv: build_venvs false)
    only.write_text("".join(line + "\n" for line in source.read_text().splitlines()
                            if json.loads(line)["instance_id"] in ("clash", "no-mirror", "stale-patch", "pins")))
    problems = []
    records = load_records(only, mirrors, {"build_venvs": False}, problems)
    assert [r["instance_id"] for r in records] == ["pins", "clash"]  # without venvs the clash is not seen
    assert [(p.instance_id, "row" in str(p)) for p in problems] == [("no-mirror", True), ("stale-patch", True)]
    assert "no local mirror of 'nobody/missing'" in str(problems[0]) and "field 'patch' does not apply" in str(problems[1])
    with pytest.raises(RowLoadError, match="row 3: no local mirror"):  # strict by default (load_records without a list)
        load_records(only, mirrors, {"build_venvs": False})
    capsys.readouterr()
    tasks = make_tasks("eval", 9, 0, source=str(only), mirrors=str(mirrors), eval_percent=100, build_venvs=False)
    assert [t.id for t in tasks] == ["pins", "clash"]
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": row ")[1][:1] for line in err] == ["3", "4"] and all(line.startswith("rlyard: skipped: ") for line in err), err


def test_envs_show_prints_the_rows_that_load_and_names_the_others(rows, tmp_path, capsys):
    from rlyard.cli import main

    source, mirrors, _, out = rows
    some = tmp_path / "some.jsonl"
    some.write_text(json.dumps(out["pins"]) + "\n" + json.dumps(out["no-mirror"]) + "\n")
    assert main(["envs", "show", "code", "-o", f"source={some}", "-o", f"mirrors={mirrors}", "-o", "eval_percent=100",
                 "-o", "build_venvs=false"]) == 0
    shown, err = capsys.readouterr()
    assert [json.loads(line)["id"] for line in shown.splitlines()] == ["pins"]
    assert f"skipped: {some}: row 2: no local mirror of 'nobody/missing'" in err, err
    (tmp_path / "none.jsonl").write_text(json.dumps(out["no-mirror"]) + "\n")
    assert main(["envs", "show", "code", "-o", f"source={tmp_path / 'none.jsonl'}", "-o", f"mirrors={mirrors}",
                 "-o", "build_venvs=false"]) == 2
    assert "no row could be loaded (1 refused); the first: " in capsys.readouterr().err


def test_validate_reports_each_unloadable_row_and_checks_the_others(rows, tmp_path, monkeypatch):
    """The whole file in one validate: the rows of each layout score 0 at base and 1 with the
    gold patch (the repository installed, its generated version module in the workspace, the
    right pinned files); the rows that cannot load are failed checks naming why."""
    from rlyard.envs.code.validate import validate

    source, mirrors, wheels, out = rows
    monkeypatch.setenv("RLYARD_CACHE", str(tmp_path / "cache"))
    checks = {c.task_id: c for c in validate({"source": str(source), "mirrors": str(mirrors), "wheels": str(wheels)}, jobs=2)}
    assert set(checks) == set(out)
    sound = {k: (c.base_reward, c.fixed_reward) for k, c in checks.items() if k in ("scm-version", "install-e-dot", "pins")}
    assert sound == {k: (0.0, 1.0) for k in sound}, "\n\n".join(f"{k}: {c.error}" for k, c in checks.items() if k in sound)
    clash = checks["clash"].error
    assert not checks["clash"].ok and "cannot load" in clash and "conflicting requirements for helper" in clash
    assert "'helper==1.0' (requirements.txt)" in clash and "'helper==2.0' (requirements-test.txt)" in clash
    assert "no local mirror" in checks["no-mirror"].error and "does not apply" in checks["stale-patch"].error
    [record] = [r for r in load_records(source, mirrors, {"wheels": str(wheels)}, []) if r["instance_id"] == "scm-version"]
    assert record["source"]["generated"] == {"scmpkg/_version.py": "version = '1.4.0'\n"}  # the build wrote it; 1.4.0 from the tag
    [venv] = record["ro_binds"]
    show = "import importlib.metadata as m, helper; print(m.version('scmpkg'), helper.VERSION)"
    assert subprocess.run([f"{venv}/bin/python", "-c", show], capture_output=True, text=True, cwd="/").stdout.split() == ["1.4.0", "1.0"]


def test_a_malformed_row_still_stops_the_file(rows, tmp_path):
    """A row whose own fields are wrong is the file's fault: refused at once, as before."""
    source, mirrors, _, out = rows
    bad = tmp_path / "rows.jsonl"
    bad.write_text(json.dumps(out["pins"]) + "\n" + json.dumps({**out["pins"], "FAIL_TO_PASS": ["test_x (tests.T)"]}) + "\n")
    with pytest.raises(RowError, match="row 2: field 'FAIL_TO_PASS'") as caught:
        load_records(bad, mirrors, {"build_venvs": False}, [])
    assert not isinstance(caught.value, RowLoadError)
