"""Your own data and reward, end to end through the CLI: a JSONL file and a reward file outside
the package, TRL reward functions used unchanged, and the docs' bad-input table, case by case."""
import json
from pathlib import Path

import pytest

from rlyard.cli import main

REPO = Path(__file__).resolve().parent.parent
TINY = ["model.lora.rank=2", "model.lora.alpha=4", "rollout.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=6",
        "rollout.truncated_reward=null", "train.steps=2", "eval.size=4", "eval.max_new_tokens=6", "output.progress=false", "output.plot=false"]

# TRL's documentation example of a custom reward, as written there (GRPOTrainer "Using a custom reward function").
TRL_DOCS_REWARD = '''
def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion[0]["content"])) for completion in completions]
'''


def write_data(folder: Path, rows: int = 12) -> Path:
    path = folder / "prompts.jsonl"
    lines = [json.dumps({"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "solution": f"${2 * i}$"})
             for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def train(run: Path, model_dir, data: Path, *overrides: str) -> int:
    return main(["train", f"model.name={model_dir}", "env.name=dataset", f"env.options.path={data}",
                 f"output.run_dir={run}", *TINY, *overrides])


def test_jsonl_and_an_outside_reward_file_train_then_eval(tmp_path, tiny_model_dir, capsys):
    data = write_data(tmp_path)
    rewards = tmp_path / "outside" / "my_rewards.py"
    rewards.parent.mkdir()
    rewards.write_text(TRL_DOCS_REWARD)
    run = tmp_path / "run"
    specs = f"[{rewards}:reward_len,trl.rewards:think_format_reward,trl.rewards:accuracy_reward]"
    assert train(run, tiny_model_dir, data, f"env.reward={specs}", "env.reward_weights=[0.01,1.0,1.0]") == 0
    steps = [m for m in read_metrics(run) if "reward/mean" in m]
    assert len(steps) == 2 and all(m["rollout/infra_errors"] == 0 for m in steps)
    assert {"reward/reward_len", "reward/think_format_reward", "reward/accuracy_reward"} <= set(steps[0])
    trajectory = json.loads((run / "trajectories.jsonl").read_text().splitlines()[0])
    length_reward = trajectory["components"]["reward_len"]
    assert length_reward <= 0 and trajectory["reward"] == pytest.approx(
        0.01 * length_reward + trajectory["components"]["think_format_reward"] + trajectory["components"]["accuracy_reward"])
    out = tmp_path / "eval.json"
    assert main(["eval", "--checkpoint", str(run), "--output", str(out)]) == 0  # the run folder it wrote, as the docs do
    result = json.loads(out.read_text())
    assert result["env"] == "dataset" and result["tasks"] > 0 and result["infra_errors"] == 0


def test_the_docs_example_command(tmp_path, tiny_model_dir, monkeypatch):
    """docs/your-data.md's command on the shipped example, as a user runs it from the checkout (the
    CLI's `main`, which the console script calls; its relative paths resolve from there)."""
    run = tmp_path / "example-run"
    monkeypatch.chdir(REPO)
    assert main(["train", "examples/your-data/config.yaml", f"model.name={tiny_model_dir}", f"output.run_dir={run}", *TINY]) == 0
    steps = [m for m in read_metrics(run) if "reward/mean" in m]
    assert len(steps) == 2 and {"reward/correct", "reward/boxed"} <= set(steps[0])


BROKEN = '''
import math
def raises(completions, **kwargs):
    raise RuntimeError("grader service down")
def wrong_length(completions, **kwargs):
    return [1.0]
def nan(completions, **kwargs):
    return [math.nan] * len(completions)
def needs_answer(completions, answer, **kwargs):
    return [1.0] * len(completions)
'''


@pytest.mark.parametrize("function, message", [
    ("raises", "RuntimeError: grader service down"),
    ("wrong_length", "returned 1 values for"),
    ("nan", "(not finite)"),
])
def test_a_broken_reward_flags_samples_and_the_run_finishes(tmp_path, tiny_model_dir, capsys, function, message):
    data, rewards, run = write_data(tmp_path), tmp_path / "broken.py", tmp_path / "run"
    rewards.write_text(BROKEN)
    assert train(run, tiny_model_dir, data, f"env.reward={rewards}:{function}", "eval.size=0") == 0
    steps = [m for m in read_metrics(run) if "reward/mean" in m]
    assert len(steps) == 2 and all(m["rollout/infra_errors"] == 4 for m in steps)  # 2 prompts x 2 samples, every step
    trajectories = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    assert all(t["infra_error"] and t["finish_reason"] == "infra_error" for t in trajectories)
    assert message in trajectories[0]["completion"] and message in capsys.readouterr().err


@pytest.mark.parametrize("setup, overrides, message", [
    ("missing_column", [], "prompts.jsonl row 1: no column 'prompt'"),
    ("empty_file", [], "prompts.jsonl: no rows (the file is empty)"),
    ("not_importable", ["env.reward=no_such_package_xyz.rewards:fn"], "env.reward: cannot import 'no_such_package_xyz.rewards'"),
    ("no_reward", ["env.reward=null"], "env.reward: env.name=dataset has no grader of its own"),
    ("needs_a_column", ["env.reward={broken}:needs_answer"], "needs_answer requires answer"),
])
def test_bad_input_is_a_clear_error_before_training(tmp_path, tiny_model_dir, capsys, setup, overrides, message):
    data = tmp_path / "prompts.jsonl"
    write_data(tmp_path)
    if setup == "missing_column":
        data.write_text(json.dumps({"question": "What is 1 + 1?"}) + "\n")
    elif setup == "empty_file":
        data.write_text("")
    (tmp_path / "broken.py").write_text(BROKEN)
    overrides = [o.format(broken=tmp_path / "broken.py") for o in overrides] or ["env.reward=rlyard.rewards:exact_match"]
    if setup in ("missing_column", "empty_file"):
        overrides = ["env.reward=rlyard.rewards:math_equal"]
    assert train(tmp_path / "run", tiny_model_dir, data, *overrides) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
