"""The synchronous loop end to end: tiny llama + real tokenizer + toy environment.

Runs are module-scoped fixtures shared by the tests that read their outputs.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch
import yaml

from rlyard.config import build_config, load_config
from rlyard.orchestrate.entry import train
from rlyard.orchestrate.targets import compute_advantages
from rlyard.types import Trajectory

from conftest import TOY_PROMPT, TOY_TARGET


def make_config(model_dir: Path, run_dir: Path, *overrides: str):
    return load_config(None, [
        f"model.name={model_dir}", "env.name=toy", "env.train_size=8", "rollout.prompts_per_step=2", "rollout.n=8",
        "rollout.max_new_tokens=8", "eval.size=0", "output.progress=false", "output.plot=false", f"output.run_dir={run_dir}",
        *overrides,
    ])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- a. learning
LEARN_STEPS = 12


@pytest.fixture(scope="module")
def learning_run(tmp_path_factory, tiny_model_dir):
    """Full fine-tuning at a high lr and temperature 0.5: the tiny model learns to emit "A".

    Measured with train.seed 0, 1 and 2: the reward starts around 0.1-0.3 and reaches 1.0
    within 4-9 steps; each step takes well under a second on one CPU thread.
    """
    run_dir = tmp_path_factory.mktemp("learn")
    config = make_config(tiny_model_dir, run_dir, "model.lora.enabled=false", "algo.lr=5e-2", "rollout.temperature=0.5",
                         f"train.steps={LEARN_STEPS}", "eval.size=2", "eval.batch_size=2", "output.plot=true",
                         "output.checkpoint_every=5")
    result = train(config, run_dir)
    return config, run_dir, result


def test_rl_drives_the_toy_reward_up(learning_run):
    _, run_dir, result = learning_run
    rows = [row for row in read_jsonl(run_dir / "metrics.jsonl") if "reward/mean" in row]
    rewards = [row["reward/mean"] for row in rows]
    assert len(rewards) == LEARN_STEPS
    start, end = statistics.fmean(rewards[:2]), statistics.fmean(rewards[-3:])
    assert 0.0 < start <= 0.4, rewards  # low but not zero: there is signal from the first step
    assert end >= 0.8 and end - start >= 0.4, rewards
    assert sum(row["time/step"] for row in rows) < 60.0  # "within a minute"
    assert result.steps == LEARN_STEPS and result.train_seconds > 0


def test_run_outputs_exist(learning_run):
    config, run_dir, result = learning_run
    # metrics.jsonl: one row per step with the documented namespaces, then the final eval row
    rows = read_jsonl(run_dir / "metrics.jsonl")
    step_rows = [row for row in rows if "reward/mean" in row]
    assert [row["step"] for row in step_rows] == list(range(1, LEARN_STEPS + 1))
    for row in step_rows:
        for key in ("reward/mean", "reward/std", "reward/pass_rate", "loss/policy", "loss/grad_norm", "loss/clip_fraction",
                    "rollout/response_tokens", "rollout/truncated_fraction", "time/step", "time/generate", "time/train",
                    "progress/samples", "train/skipped_sequences"):
            assert key in row and isinstance(row[key], (int, float)), key
        assert row["progress/samples"] == row["step"] * 16
        assert row["time/step"] > 0 and 0.0 <= row["reward/mean"] <= 1.0
    eval_rows = [row for row in rows if "eval/accuracy" in row]
    assert [row["step"] for row in eval_rows] == [0, LEARN_STEPS]  # base model, then final model
    assert eval_rows[0]["eval/accuracy"] == result.base_accuracy
    assert eval_rows[1]["eval/accuracy"] == result.final_accuracy

    # trajectories.jsonl: every sample, readable, and its reward is the toy verifier's verdict
    trajs = read_jsonl(run_dir / "trajectories.jsonl")
    assert len(trajs) == LEARN_STEPS * 16
    assert [row["step"] for row in trajs] == [s for s in range(1, LEARN_STEPS + 1) for _ in range(16)]
    for row in trajs:
        assert TOY_PROMPT in row["prompt"] and "<|im_start|>assistant" in row["prompt"]
        assert row["reward"] == float(TOY_TARGET in row["completion"])
        assert 1 <= row["num_tokens"] <= 8 and row["finish_reason"] in ("stop", "length")
        assert row["infra_error"] is False
    rewards_by_step = {}
    for row in trajs:
        rewards_by_step.setdefault(row["step"], []).append(row["reward"])
    for row in step_rows:
        assert row["reward/mean"] == pytest.approx(statistics.fmean(rewards_by_step[row["step"]]))

    # the plot, the saved config and the checkpoints
    png = run_dir / "reward_curve.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert build_config(yaml.safe_load((run_dir / "config.yaml").read_text())) == config
    root = run_dir / "checkpoints"
    assert (root / "latest").read_text().strip() == f"step_{LEARN_STEPS:06d}"
    kept = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert kept == ["step_000010", f"step_{LEARN_STEPS:06d}"]  # every 5 steps + the last, keep 2
    for name in kept:
        assert {p.name for p in (root / name).iterdir()} >= {"weights.pt", "optimizer.pt", "state.pt"}
    state = torch.load(root / kept[-1] / "state.pt", weights_only=False)
    assert state["step"] == LEARN_STEPS and state["policy_version"] == LEARN_STEPS
    assert state["stream"]["position"] == LEARN_STEPS * 2
    weights = torch.load(root / kept[-1] / "weights.pt", weights_only=True)
    assert "model.norm.weight" in weights  # full fine-tuning saves every weight


# --------------------------------------------------------------------------- b. resume
RESUME_MODES = {
    "lora": ["model.lora.rank=4", "model.lora.alpha=8", "algo.lr=2e-2"],
    "full": ["model.lora.enabled=false", "algo.lr=1e-2"],
}


@pytest.mark.parametrize("mode", sorted(RESUME_MODES))
def test_resume_reproduces_the_uninterrupted_run(tmp_path, tiny_model_dir, mode):
    common = [*RESUME_MODES[mode], "rollout.temperature=1.0", "output.checkpoint_every=2"]
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    train(make_config(tiny_model_dir, run_a, *common, "train.steps=4"), run_a)
    train(make_config(tiny_model_dir, run_b, *common, "train.steps=2"), run_b)
    assert (run_b / "checkpoints" / "latest").read_text().strip() == "step_000002"
    saved = yaml.safe_load((run_b / "config.yaml").read_text())
    saved["train"]["steps"] = 4
    train(build_config(saved), run_b, resume=True)

    traj_a, traj_b = read_jsonl(run_a / "trajectories.jsonl"), read_jsonl(run_b / "trajectories.jsonl")
    assert [r["step"] for r in traj_b] == [r["step"] for r in traj_a] == [s for s in (1, 2, 3, 4) for _ in range(16)]
    assert traj_b == traj_a  # same completions, rewards, groups, finish reasons at every step, incl. 3 and 4
    assert len({r["completion"] for r in traj_a if r["step"] >= 3}) > 1

    metrics_a, metrics_b = read_jsonl(run_a / "metrics.jsonl"), read_jsonl(run_b / "metrics.jsonl")
    assert [m["step"] for m in metrics_b] == [1, 2, 3, 4]
    for ma, mb in zip(metrics_a, metrics_b):
        for key in ("reward/mean", "loss/policy", "loss/clip_fraction", "rollout/response_tokens"):
            assert mb[key] == pytest.approx(ma[key], abs=1e-6), (ma["step"], key)

    for step in ("step_000002", "step_000004"):
        wa = torch.load(run_a / "checkpoints" / step / "weights.pt", weights_only=True)
        wb = torch.load(run_b / "checkpoints" / step / "weights.pt", weights_only=True)
        assert wa.keys() == wb.keys()
        assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6, step
    w2 = torch.load(run_a / "checkpoints" / "step_000002" / "weights.pt", weights_only=True)
    w4 = torch.load(run_a / "checkpoints" / "step_000004" / "weights.pt", weights_only=True)
    assert max((w2[k] - w4[k]).abs().max().item() for k in w2) > 1e-4  # steps 3-4 did train


def test_resume_after_a_crash_redoes_the_unsaved_step(tmp_path, tiny_model_dir):
    """Killed after step 3 was logged but before its checkpoint: resume cuts the logs back to
    step 2 and redoes step 3 exactly once, with the same samples and the same weights."""
    run_dir = tmp_path / "crash"
    config = make_config(tiny_model_dir, run_dir, *RESUME_MODES["full"], "output.checkpoint_every=2", "train.steps=3")
    train(config, run_dir)
    root = run_dir / "checkpoints"
    trajs, metrics = read_jsonl(run_dir / "trajectories.jsonl"), read_jsonl(run_dir / "metrics.jsonl")
    weights = torch.load(root / "step_000003" / "weights.pt", weights_only=True)
    # the crash: step 3's checkpoint never landed, the pointer still names step 2
    for path in (root / "step_000003").iterdir():
        path.unlink()
    (root / "step_000003").rmdir()
    (root / "latest").write_text("step_000002")

    train(config, run_dir, resume=True)
    assert read_jsonl(run_dir / "trajectories.jsonl") == trajs  # step 3 once, same samples
    again = read_jsonl(run_dir / "metrics.jsonl")
    assert [row["step"] for row in again] == [1, 2, 3]
    assert again[2]["loss/policy"] == pytest.approx(metrics[2]["loss/policy"], abs=1e-6)
    redone = torch.load(root / "step_000003" / "weights.pt", weights_only=True)
    assert max((weights[k] - redone[k]).abs().max().item() for k in weights) < 1e-6


# --------------------------------------------------------------------------- d. broken verifier
def test_verifier_exception_flags_infra_error_and_run_continues(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "broken"
    config = make_config(tiny_model_dir, run_dir, "env.name=toy_broken", "rollout.n=4", "rollout.max_new_tokens=4",
                         "model.lora.rank=2", "model.lora.alpha=4", "train.steps=2")
    result = train(config, run_dir)
    assert result.steps == 2
    trajs = read_jsonl(run_dir / "trajectories.jsonl")
    assert len(trajs) == 2 * 8
    broken = [r for r in trajs if r["infra_error"]]
    fine = [r for r in trajs if not r["infra_error"]]
    assert broken and fine, "the even-length rule should break some episodes and spare others"
    for row in broken:
        assert row["finish_reason"] == "infra_error" and row["reward"] == 0.0
        assert "[verifier error]" in row["completion"] and "grader crashed" in row["completion"]
    for row in fine:
        assert row["finish_reason"] in ("stop", "length") and row["reward"] == float(TOY_TARGET in row["completion"])
    metrics = [row for row in read_jsonl(run_dir / "metrics.jsonl") if "reward/mean" in row]
    assert [row["step"] for row in metrics] == [1, 2]
    for row in metrics:
        step_rows = [r for r in trajs if r["step"] == row["step"]]
        assert row["rollout/infra_errors"] == sum(r["infra_error"] for r in step_rows)
        valid = [r["reward"] for r in step_rows if not r["infra_error"]]
        assert row["reward/mean"] == pytest.approx(statistics.fmean(valid) if valid else 0.0)
    assert (run_dir / "checkpoints" / "step_000002" / "state.pt").exists()


def _traj(group: str, reward: float, infra: bool = False) -> Trajectory:
    return Trajectory(task_id=group, group_id=group, token_ids=[1, 2, 3], loss_mask=[0, 1, 1], behaviour_logprobs=[0.0, -1.0, -1.0],
                      policy_versions=[-1, 0, 0], reward=reward, infra_error=infra)


def test_infra_errors_leave_their_group_before_advantages(tiny_model_dir, tmp_path):
    config = make_config(tiny_model_dir, tmp_path)
    batch = [_traj("g", 1.0), _traj("g", 0.0), _traj("g", 0.0, infra=True), _traj("g", 1.0)]
    advantages = compute_advantages(config, batch).advantages
    # valid rewards [1, 0, 1]: mean 2/3, sample std sqrt(((1/3)^2 * 2 + (2/3)^2) / 2) = sqrt(1/3)
    std = ((2 * (1 / 3) ** 2 + (2 / 3) ** 2) / 2) ** 0.5
    up, down = (1 / 3) / (std + 1e-6), (-2 / 3) / (std + 1e-6)
    assert advantages == pytest.approx([up, down, 0.0, up], abs=1e-6)
