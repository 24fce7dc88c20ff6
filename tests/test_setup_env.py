"""Which Python environment scripts/setup.sh and scripts/test.sh use (scripts/env.sh).

The system interpreter is never installed into: without an active environment it is the
project's .venv; an activated virtualenv (or PYTHON pointing into one) is used as it is.
"""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def resolve(**env: str) -> tuple[str, str]:
    """(RLYARD_ENV, RLYARD_ENV_KIND) as scripts/env.sh sets them under `env`."""
    base = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHON")}
    script = f'source "{ROOT}/scripts/env.sh"; echo "$RLYARD_ENV"; echo "$RLYARD_ENV_KIND"'
    out = subprocess.run(["bash", "-c", script], env={**base, **env}, capture_output=True, text=True, check=True).stdout
    folder, kind = out.splitlines()
    return folder, kind


SYSTEM = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.base_prefix + "/bin/python3"


def test_no_active_environment_means_the_project_virtualenv():
    assert resolve(PYTHON=SYSTEM) == (str(ROOT / ".venv"), "the project virtualenv .venv")


def test_an_activated_virtualenv_is_used_as_it_is(tmp_path):
    venv.create(tmp_path / "mine", with_pip=False)
    folder, kind = resolve(VIRTUAL_ENV=str(tmp_path / "mine"))
    assert folder == str(tmp_path / "mine") and kind == "the active virtualenv"


def test_python_pointing_into_a_virtualenv_is_used_as_it_is(tmp_path):
    venv.create(tmp_path / "other", with_pip=False)
    folder, kind = resolve(PYTHON=str(tmp_path / "other" / "bin" / "python"))
    assert Path(folder).resolve() == (tmp_path / "other").resolve() and kind.startswith("the virtualenv of PYTHON=")


def test_a_stale_virtual_env_variable_without_python_is_ignored(tmp_path):
    assert resolve(VIRTUAL_ENV=str(tmp_path / "gone"), PYTHON=SYSTEM)[1] == "the project virtualenv .venv"


def test_the_conda_base_environment_is_not_installed_into(tmp_path):
    venv.create(tmp_path / "conda", with_pip=False)
    assert resolve(CONDA_PREFIX=str(tmp_path / "conda"), CONDA_DEFAULT_ENV="base", PYTHON=SYSTEM)[1] == "the project virtualenv .venv"
    assert resolve(CONDA_PREFIX=str(tmp_path / "conda"), CONDA_DEFAULT_ENV="work")[1] == "the active conda environment"
