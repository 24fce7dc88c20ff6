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


# One interpreter runs the CLI's main() on several command lines (a config resolves in a few
# seconds, most of it importing the environment families): {argv: [exit code, stdout, stderr]}.
CLI_RUNS = r"""
import contextlib, io, json, sys
import rlyard, rlyard.config
from rlyard.cli import main
results = {"rlyard.__file__": rlyard.__file__, "PACKAGE_CONFIGS": str(rlyard.config.PACKAGE_CONFIGS)}
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    results[" ".join(argv)] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(results))
"""
COMMANDS = {
    "default": ["train", "--print-config"],
    "named": ["train", "configs/quickstart.yaml", "train.steps=3", "--print-config"],
    "dapo": ["train", "configs/quickstart.yaml", "algo=dapo", "--print-config"],
    "unknown preset": ["train", "algo=dapoo", "--print-config"],
    "missing config": ["train", "configs/nope.yaml", "--print-config"],
}


@pytest.fixture(scope="module")
def cli_runs(installed, tmp_path_factory) -> dict:
    """The CLI's results for COMMANDS, run with the install on PYTHONPATH from an unrelated folder."""
    import json

    target, env = installed
    cwd = tmp_path_factory.mktemp("elsewhere")
    result = subprocess.run([sys.executable, "-c", CLI_RUNS, json.dumps(list(COMMANDS.values()))], cwd=cwd,
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)
    return {"paths": [runs.pop("rlyard.__file__"), runs.pop("PACKAGE_CONFIGS")],
            **{name: runs[" ".join(argv)] for name, argv in COMMANDS.items()}}


def test_the_wheel_holds_every_shipped_config(installed):
    target, _ = installed
    shipped = {p.relative_to(ROOT / "configs").as_posix() for p in (ROOT / "configs").rglob("*.yaml")}
    packaged = {p.relative_to(target / "rlyard" / "configs").as_posix() for p in (target / "rlyard" / "configs").rglob("*.yaml")}
    assert shipped and shipped == packaged


def test_it_imports_from_the_install_not_the_checkout(installed, cli_runs):
    target, _ = installed
    assert all(path.startswith(str(target)) for path in cli_runs["paths"]), cli_runs["paths"]


def test_train_help_from_another_folder(installed, tmp_path):
    help_ = rlyard(installed, tmp_path, "train", "--help")
    assert help_.returncode == 0, help_.stderr
    assert "--print-config" in help_.stdout and "configs/quickstart.yaml" in help_.stdout


def test_the_quickstart_from_another_folder(installed, cli_runs):
    target, _ = installed
    code, out, err = cli_runs["default"]
    assert code == 0, err
    assert f"# resolved from {target / 'rlyard' / 'configs' / 'quickstart.yaml'}" in out
    # the quickstart's values, not the schema's defaults (name "run", 30 steps, max_new_tokens 32)
    assert "name: quickstart" in out and "steps: 50" in out and "max_new_tokens: 16" in out
    code, out, err = cli_runs["named"]
    assert code == 0, err
    assert "name: quickstart" in out and "steps: 3" in out


def test_dapo_preset_from_another_folder(cli_runs):
    code, out, err = cli_runs["dapo"]
    assert code == 0, err
    for line in ("name: dapo", "eps_high: 0.28", "dynamic_sampling: true", "soft_overlong: true"):
        assert f"  {line}\n" in out, line


def test_unknown_preset_and_config_are_clear_errors(cli_runs):
    code, out, err = cli_runs["unknown preset"]
    assert code == 2 and out == ""
    assert "algo=dapoo: no preset configs/algos/dapoo.yaml" in err and "dapo" in err.split("available:")[1]
    code, out, err = cli_runs["missing config"]
    assert code == 2 and out == "" and "configs/nope.yaml does not exist" in err
    assert "configs/quickstart.yaml" in err  # it names what is shipped
