"""A non-editable install finds its configs: the quickstart and the algorithm presets ship in the wheel.

The checkout is copied (so no stale build/ folder leaks in), installed with
`pip install --no-deps --target DIR` (dependencies come from this venv) and run with
PYTHONPATH=DIR from an unrelated folder that has no configs/ of its own.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict]:
    """(the install target, the environment that imports rlyard from it)."""
    pytest.importorskip("setuptools")
    base = tmp_path_factory.mktemp("wheel")
    source = base / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", "runs")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("rlyard", "configs"):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=ignore)
    target = base / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", str(target), str(source)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    assert not (target / "rlyard" / "configs").is_symlink()  # real files in the wheel, not a link into the checkout
    env = {**os.environ, "PYTHONPATH": str(target), "COLUMNS": "120"}
    env.pop("PYTHONHOME", None)
    return target, env


def rlyard(installed, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    target, env = installed
    return subprocess.run([sys.executable, "-m", "rlyard.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env)


def test_the_wheel_holds_every_shipped_config(installed):
    target, _ = installed
    shipped = {p.relative_to(ROOT / "configs").as_posix() for p in (ROOT / "configs").rglob("*.yaml")}
    packaged = {p.relative_to(target / "rlyard" / "configs").as_posix() for p in (target / "rlyard" / "configs").rglob("*.yaml")}
    assert shipped and shipped == packaged


def test_it_imports_from_the_install_not_the_checkout(installed, tmp_path):
    target, env = installed
    result = subprocess.run([sys.executable, "-c", "import rlyard, rlyard.config as c; print(rlyard.__file__); print(c.PACKAGE_CONFIGS)"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert all(line.startswith(str(target)) for line in result.stdout.split()), result.stdout


def test_train_help_and_the_quickstart_from_another_folder(installed, tmp_path):
    target, _ = installed
    help_ = rlyard(installed, tmp_path, "train", "--help")
    assert help_.returncode == 0 and "--print-config" in help_.stdout
    result = rlyard(installed, tmp_path, "train", "--print-config")
    assert result.returncode == 0, result.stderr
    assert f"# resolved from {target / 'rlyard' / 'configs' / 'quickstart.yaml'}" in result.stdout
    # the quickstart's values, not the schema's defaults (name "run", 30 steps, max_new_tokens 32)
    assert "name: quickstart" in result.stdout and "steps: 50" in result.stdout and "max_new_tokens: 16" in result.stdout
    named = rlyard(installed, tmp_path, "train", "configs/quickstart.yaml", "train.steps=3", "--print-config")
    assert named.returncode == 0, named.stderr
    assert "name: quickstart" in named.stdout and "steps: 3" in named.stdout


def test_dapo_preset_from_another_folder(installed, tmp_path):
    result = rlyard(installed, tmp_path, "train", "configs/quickstart.yaml", "algo=dapo", "--print-config")
    assert result.returncode == 0, result.stderr
    for line in ("name: dapo", "eps_high: 0.28", "dynamic_sampling: true", "soft_overlong: true"):
        assert f"  {line}\n" in result.stdout, line


def test_unknown_preset_and_config_are_clear_errors(installed, tmp_path):
    preset = rlyard(installed, tmp_path, "train", "algo=dapoo", "--print-config")
    assert preset.returncode == 2 and preset.stdout == ""
    assert "algo=dapoo: no preset configs/algos/dapoo.yaml" in preset.stderr and "dapo" in preset.stderr.split("available:")[1]
    missing = rlyard(installed, tmp_path, "train", "configs/nope.yaml", "--print-config")
    assert missing.returncode == 2 and "configs/nope.yaml does not exist" in missing.stderr
    assert "configs/quickstart.yaml" in missing.stderr  # it names what is shipped
    assert "Traceback" not in preset.stderr + missing.stderr
