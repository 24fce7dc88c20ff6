"""A family from outside the package: installed with an `rlyard.envs` entry point, or a local module.

The echo family of docs/architecture.md is written into a temporary package, installed with
`pip install --no-deps --target DIR` and found by `rlyard envs` and `rlyard train env.name=echo`
in a fresh interpreter with DIR on PYTHONPATH; the same module given as `env.name=module:FAMILY`
trains from the folder it lives in without being installed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlyard.envs import ENTRY_POINT_GROUP, FamilyNotFound, get_family

# The example of docs/architecture.md, as a user would save it (kept equal by the test below).
ECHO = '''\
from rlyard.envs import Family, SingleTurnEnv
from rlyard.types import Reward, Task


def make_tasks(split: str, n: int, seed: int, **options) -> list[Task]:
    start = 0 if split == "train" else 10_000  # held-out numbers for eval
    return [Task(id=f"echo-{split}-{i}", prompt=[{"role": "user", "content": f"Say {start + i}."}],
                 env="echo", payload={"answer": str(start + i)}) for i in range(n)]


def verify(reply: str, task: Task) -> Reward:
    ok = task.payload["answer"] in reply
    return Reward(value=float(ok), components={"correct": float(ok)})


FAMILY = Family("echo", make_tasks, lambda: SingleTurnEnv(verify), verify, "say a number")
'''
PYPROJECT = f'''\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "rlyard-echo"
version = "0.1.0"

[project.entry-points."{ENTRY_POINT_GROUP}"]
echo = "rlyard_echo:FAMILY"
'''
ROOT = Path(__file__).resolve().parent.parent


def tiny_train(model_dir: Path, run_dir: Path, env_name: str) -> list[str]:
    return ["train", f"env.name={env_name}", f"model.name={model_dir}", "model.lora.rank=2", "model.lora.alpha=4",
            "env.train_size=4", "rollout.prompts_per_step=1", "rollout.n=2", "rollout.max_new_tokens=3", "train.steps=1",
            "eval.size=2", "eval.max_new_tokens=3", "eval.at_start=false", "output.progress=false", "output.plot=false",
            f"output.run_dir={run_dir}"]


def run_cli(cwd: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", "import sys; from rlyard.cli import main; sys.exit(main(sys.argv[1:]))",
                             *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"rlyard {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


def trained_steps(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [row for row in rows if "reward/mean" in row]


def test_the_docs_show_this_family():
    docs = (ROOT / "docs" / "architecture.md").read_text()
    assert ECHO in docs, "docs/architecture.md's echo example drifted from the one this test installs"
    assert PYPROJECT.split("[project.entry-points")[1] in docs


@pytest.fixture(scope="module")
def installed_echo(tmp_path_factory) -> dict:
    pytest.importorskip("setuptools")
    base = tmp_path_factory.mktemp("echo-plugin")
    source = base / "src"
    (source / "rlyard_echo").mkdir(parents=True)
    (source / "rlyard_echo" / "__init__.py").write_text(ECHO)
    (source / "pyproject.toml").write_text(PYPROJECT)
    target = base / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                              "--target", str(target), str(source)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    assert (target / "rlyard_echo").is_dir() and list(target.glob("rlyard_echo-0.1.0.dist-info/entry_points.txt"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)]), "COLUMNS": "120"}
    return env


def test_an_installed_family_is_listed_and_trains_a_step(installed_echo, tiny_model_dir, tmp_path):
    listing = run_cli(tmp_path, installed_echo, "envs", "list").stdout
    assert "echo" in listing and "say a number" in listing
    run_dir = tmp_path / "run"
    out = run_cli(tmp_path, installed_echo, *tiny_train(tiny_model_dir, run_dir, "echo")).stdout
    steps = trained_steps(run_dir)
    assert [row["step"] for row in steps] == [1], out
    assert (run_dir / "checkpoints").is_dir()
    saved = (run_dir / "config.yaml").read_text()
    assert "name: echo" in saved


def test_a_local_module_trains_by_module_and_attribute(tiny_model_dir, tmp_path):
    (tmp_path / "my_echo.py").write_text(ECHO)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run_dir = tmp_path / "run"
    run_cli(tmp_path, env, *tiny_train(tiny_model_dir, run_dir, "my_echo:FAMILY"))
    assert [row["step"] for row in trained_steps(run_dir)] == [1]
    trajectories = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    assert trajectories and all(t["task_id"].startswith("echo-train-") for t in trajectories)


def test_a_bad_spec_says_what_is_wrong(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not_a_family.py").write_text("FAMILY = 42\n")
    with pytest.raises(FamilyNotFound, match="cannot import 'no_such_module'"):
        get_family("no_such_module:FAMILY")
    with pytest.raises(FamilyNotFound, match="has no attribute 'NOPE'"):
        get_family("not_a_family:NOPE")
    with pytest.raises(FamilyNotFound, match="is a int, not a rlyard.envs.Family"):
        get_family("not_a_family:FAMILY")
    with pytest.raises(FamilyNotFound, match="unknown environment 'echoo'.*arith"):
        get_family("echoo")
