"""SWE-bench rows built from REAL bug-fix commits of small public pure-Python projects.

Each case names a repository, the full sha of a bug-fix commit, and the FAIL_TO_PASS /
PASS_TO_PASS node ids (found by running the commit's test files at fix^ + the test part and at
the fix). The test builds the row the way SWE-bench does (`row_from_commit`: base_commit = fix^,
patch = the fix's non-test part, test_patch = its test part, both `git diff`) and proves with
`validate` that the base scores 0 and the gold patch 1, in the sandbox (bash arm).

    RLYARD_REAL_MIRRORS=/path/to/mirrors pytest tests/envs/test_code_real_repos.py

The folder holds git mirrors as `<owner>__<name>` (`git clone --mirror https://github.com/o/n
mirrors/o__n`); the `<owner>+<name>/repo` layout of rlyard's own fetch folder works too.
RLYARD_REAL_WHEELS: a wheel folder for the cases that need packages (`pip download -d wheels
pytz simplejson`); those cases skip without it. Without RLYARD_REAL_MIRRORS everything skips.
The cases of issue 35 (filelock, platformdirs, humanize, arrow, itsdangerous, dateutil) install
their packages from the machine's pip configuration (its index), as a user's rows would; each
was checked first with plain pytest (`python -m pytest` in the row's venv, PYTHONPATH=src:.) at
fix^ + the test part (the FAIL_TO_PASS ids fail) and at the fix (all pass).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rlyard.envs.code.loaders import load_records, row_from_commit

MIRRORS = os.environ.get("RLYARD_REAL_MIRRORS")
WHEELS = os.environ.get("RLYARD_REAL_WHEELS")
pytestmark = pytest.mark.skipif(not MIRRORS, reason="RLYARD_REAL_MIRRORS is not set (a folder of git mirrors <owner>__<name> "
                                                    "of the repositories below); see the module docstring")


@dataclass
class Case:
    repo: str
    fix: str  # the bug-fix commit; base_commit is its parent
    base: str  # fix^, written down so a rewritten mirror is noticed
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    layout: str
    fields: dict = field(default_factory=dict)  # extra row fields
    needs_wheels: bool = False
    mirror_as: str = ""  # where the mirror is laid under `mirrors` (default <owner>__<name>)
    generated: tuple[str, ...] = ()  # files installing the repository writes into the workspace
    needs: str = ""  # what in the loader this case needed (the class of issue 35 it shows)


CASES = [
    Case("pytoolz/toolz", "5a7e078c941c990dcaca53ac6920e5d5c0b1475f", "1fb2b9f1b69ab664a264944f4eafc290acce127d",
         ["toolz/tests/test_itertoolz.py::test_partition_all"],
         ["toolz/tests/test_itertoolz.py::test_remove", "toolz/tests/test_itertoolz.py::test_groupby",
          "toolz/tests/test_itertoolz.py::test_groupby_non_callable"],
         "flat package at the root, tests inside the package (toolz/tests/)"),
    Case("more-itertools/more-itertools", "958990e22c4ab6daf434d89cf2b86d7a4a7a9e3c", "ed86a1528aa015f219f8d3385ea2ebd3f63a5212",
         ["tests/test_more.py::SlicedTests::test_negative"],
         ["tests/test_more.py::ChunkedTests::test_even", "tests/test_more.py::ChunkedTests::test_none",
          "tests/test_more.py::ChunkedTests::test_odd"],
         "flat package at the root, unittest classes in tests/; Debian ships an older more_itertools that must not shadow it"),
    Case("tkem/cachetools", "57d2e4813d9801f97034559e22428bac6f7c6c9b", "8011b71949e8d8d81a71359cca9477d67a2c9c0b",
         ["tests/test_cachedmethod.py::AutospecTest::test_autospec_no_warnings"],
         ["tests/test_cachedmethod.py::CacheMethodTest::test_cond_nospace", "tests/test_cachedmethod.py::CacheMethodTest::test_decorator",
          "tests/test_cachedmethod.py::CacheMethodTest::test_decorator_attributes"],
         "src/ layout (src/cachetools), tests/ a package"),
    Case("pytest-dev/pluggy", "7aef3e608fddc57648daffaec23432e6893f26ff", "cc36605090dfa090777b3d69ca91132ad852c6f2",
         ["testing/test_pluginmanager.py::test_register_while_calling[False]",
          "testing/test_pluginmanager.py::test_register_while_calling[True]"],
         ["testing/test_pluginmanager.py::test_plugin_double_register", "testing/test_pluginmanager.py::test_pm",
          "testing/test_pluginmanager.py::test_has_plugin"],
         "src/ layout, fixtures (pm, he_pm) from testing/conftest.py, parametrized ids",
         # its `testing` extra is pytest + pytest-benchmark, which only testing/benchmark.py needs
         # pytest itself runs on the sandbox's pluggy; the runner drops it from sys.modules so the tests import this one
         fields={"pip_packages": []}),
    Case("marshmallow-code/marshmallow", "8f493e66b38d71269a8388b120b537a7fbd60ca8", "cd976d5d2220a5e2f553fec2082a5d254a7019da",
         ["tests/test_schema.py::test_fields_must_be_declared_as_instances"],
         ["tests/test_schema.py::test_serializing_basic_object[UserSchema]",
          "tests/test_schema.py::test_serializing_basic_object[UserMetaSchema]", "tests/test_schema.py::test_serializer_dump"],
         "src/ layout, conftest.py fixtures importing tests.base; its tests extra (pytz, simplejson) in a venv",
         needs_wheels=True),
    # issue 35's real rows: each layout below failed to load or to grade before the loader's fix
    Case("tox-dev/filelock", "3a79343711eef57b864670dc2cafd352ed749d9b",
         "81d4cf9e9ea98cefdf9f380b024d627dffb28efb", ["tests/test_virtualenv.py::test_virtualenv"],
         ["tests/test_filelock.py::test_simple[a-str-UnixFileLock]", "tests/test_filelock.py::test_simple[a-str-SoftFileLock]"],
         "src/ layout, hatch-vcs writes src/filelock/version.py at build time; `import filelock` needs it",
         generated=("src/filelock/version.py",), needs="install the repository (hatch-vcs version file)"),
    Case("tox-dev/platformdirs", "5ec69d86917fb1ac23207893ccd598f8af805ba5",
         "dbf360f9f894a8937c624ce4259b5c070465f78d", ["tests/test_android.py::test_android_folder_from_p4a"],
         ["tests/test_android.py::test_android[user_data_dir-no_args]", "tests/test_android.py::test_android[user_data_dir-app_name]"],
         "src/ layout, hatch-vcs version file, a `test` extra with pytest-mock and a pinned appdirs",
         generated=("src/platformdirs/version.py",), needs="install the repository (hatch-vcs version file)"),
    Case("python-humanize/humanize", "11e62eeedb8990298c3612af82376dc2344d24f8",
         "a0602c70bb6e11322107b51114333bab7adab021",
         ["tests/test_filesize.py::test_naturalsize[test_args62-1 Bytes]", "tests/test_filesize.py::test_naturalsize[test_args65-1B]"],
         ["tests/test_filesize.py::test_naturalsize[test_args0-300 Bytes]", "tests/test_filesize.py::test_naturalsize[test_args1-1.0 kB]"],
         "src/ layout, hatch-vcs src/humanize/_version.py, a root requirements-mypy.txt (a tool's file), ids with spaces",
         generated=("src/humanize/_version.py",), needs="install the repository; a tool's requirements file left out"),
    Case("arrow-py/arrow", "02e3b1b4c56b905a13f7ae3f552728a5a17fc5bd",
         "587af5fbe949e18d60387b0b7cb1e14855e85401",
         ["tests/test_locales.py::TestGreekLocale::test_format_relative_future", "tests/test_locales.py::TestGreekLocale::test_month_abbreviation"],
         ["tests/test_locales.py::TestLocaleValidation::test_locale_validation", "tests/test_locales.py::TestModule::test_get_locale"],
         "flat package, requirements/ folder: requirements.txt, requirements-tests.txt (pins), requirements-docs.txt (a tool's)",
         needs="requirement files of a requirements/ folder chosen (tests, not docs)"),
    Case("pallets/itsdangerous", "7f4dcf83a07bb3d53f4e0e65ef1b43327b4cca90",
         "93ae366874bbd4f69d90495c45b2cd336387496c",
         ["tests/test_itsdangerous/test_serializer.py::test_digests",
          "tests/test_itsdangerous/test_serializer.py::TestSerializer::test_iter_unsigners[Serializer]"],
         ["tests/test_itsdangerous/test_signer.py::TestSigner::test_signer", "tests/test_itsdangerous/test_signer.py::TestSigner::test_no_separator"],
         "src/ layout, pip-compile pinned requirements/{build,dev,docs,tests,typing}.txt; dev.txt pulls in every tool's pins",
         needs="only requirements/tests.txt read (pytest==8.1.1, freezegun pinned), not dev/docs/typing/build"),
    Case("dateutil/dateutil", "bd69e8e964b6572184ab6bf49b651fba617eae4f",
         "4a50ff7c8ead9cb4c02080d9f8f302e2ea7b34bd", ["dateutil/test/test_tz.py::test_gettz_same_result_for_none_and_empty_string"],
         ["dateutil/test/test_tz.py::TzUTCTest::testAmbiguity", "dateutil/test/test_tz.py::TzUTCTest::testDst"],
         "owner == name, tests inside the package (dateutil/test/), setuptools_scm, setup.cfg + requirements-dev.txt",
         mirror_as="dateutil/dateutil.git", generated=("dateutil/_version.py",),
         needs="a mirror laid as <owner>/<name>.git next to the owner's other folders; install the repository"),
]


def find_mirror(repo: str) -> Path | None:
    owner, name = repo.split("/")
    root = Path(MIRRORS)
    for candidate in (root / f"{owner}__{name}", root / f"{owner}__{name}.git", root / f"{owner}+{name}" / "repo", root / f"{owner}+{name}"):
        if (candidate / "HEAD").exists() or (candidate / ".git").exists():
            return candidate.resolve()
    return None


@pytest.mark.parametrize("case", [pytest.param(c, id=c.repo) for c in CASES])
def test_a_real_bug_fix_commit_validates_base_0_gold_1(case, tmp_path, monkeypatch):
    from rlyard.envs.code.validate import validate
    from rlyard.sandbox import Sandbox

    mirror = find_mirror(case.repo)
    if mirror is None:
        pytest.skip(f"no mirror of {case.repo} in {MIRRORS}")
    if case.needs_wheels and not WHEELS:
        pytest.skip(f"{case.repo} needs packages: set RLYARD_REAL_WHEELS to a wheel folder")
    if not os.environ.get("RLYARD_CACHE"):
        monkeypatch.setenv("RLYARD_CACHE", str(tmp_path / "cache"))
    mirrors = tmp_path / "mirrors"
    laid = mirrors / (case.mirror_as or case.repo.replace("/", "__"))
    laid.parent.mkdir(parents=True)
    laid.symlink_to(mirror)
    if case.mirror_as:  # the owner's folder holds other things too: it must not be taken for the mirror
        (laid.parent / "docs-site").mkdir()
    row = row_from_commit(laid, case.fix, case.fail_to_pass, case.pass_to_pass, repo=case.repo, **case.fields)
    assert row["base_commit"] == case.base
    source = tmp_path / "rows.jsonl"
    source.write_text(json.dumps(row) + "\n")
    options = {"wheels": WHEELS} if case.needs_wheels else {}
    [record] = load_records(source, mirrors, options)
    assert record["expected_tests"] == case.fail_to_pass + case.pass_to_pass and record["xfail_ok"] == case.pass_to_pass
    assert sorted(record["source"].get("generated", {})) == sorted(case.generated), record["source"].get("generated")
    if record["ro_binds"]:  # the row's own venv runs inside the sandbox that binds it read-only
        [venv] = record["ro_binds"]
        probe = Sandbox(tmp_path, ro_binds=(venv,)).run(["/bin/sh", "-c", f"{venv}/bin/python -c 'print(42)'"], timeout_s=30)
        assert probe.text.strip() == "42", probe.text
    [check] = validate({"source": str(source), "mirrors": str(mirrors), **options}, jobs=1)
    assert (check.base_reward, check.fixed_reward) == (0.0, 1.0), f"{case.repo} ({case.layout}):\n{check.error}"
