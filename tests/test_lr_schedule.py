"""Learning-rate schedules (`algo.lr_schedule`, `algo.warmup_steps`; `sft.schedule`) against values
worked out by hand, the learner's count of optimizer steps, and resume continuing the sequence."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rlyard.config import AlgoConfig, load_config
from rlyard.observe import read_metrics
from rlyard.orchestrate.entry import train
from rlyard.sft.train import lr_at as sft_lr_at
from rlyard.train import Learner
from rlyard.train.schedule import lr_at
from rlyard.types import Trajectory


def test_warmup_is_linear_from_lr_over_warmup_to_lr():
    assert [lr_at(step, 100, 1.0, "cosine", 4) for step in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert [lr_at(step, 100, 2.0, "constant", 2) for step in (0, 1, 2, 50, 99)] == [1.0, 2.0, 2.0, 2.0, 2.0]


def test_decay_from_the_end_of_warmup_to_zero_at_the_last_step():
    # total 10, warmup 2: the decay runs over steps 2..10, its midpoint is step 6.
    assert lr_at(2, 10, 1.0, "cosine", 2) == 1.0
    assert lr_at(6, 10, 1.0, "cosine", 2) == pytest.approx(0.5)
    assert lr_at(4, 10, 1.0, "cosine", 2) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))  # 0.8536
    assert lr_at(9, 10, 1.0, "cosine", 2) == pytest.approx(0.5 * (1 - math.cos(math.pi / 8)))  # the last step: 0.0381
    assert lr_at(6, 10, 1.0, "linear", 2) == pytest.approx(0.5)
    assert lr_at(9, 10, 1.0, "linear", 2) == pytest.approx(0.125)
    assert lr_at(10, 10, 1.0, "cosine", 2) == lr_at(10, 10, 1.0, "linear", 2) == 0.0
    assert lr_at(0, 4, 1.0, "linear") == 1.0 and lr_at(2, 4, 1.0, "linear") == 0.5  # no warmup


def test_sft_uses_the_same_schedule():
    assert sft_lr_at is lr_at


def one_sequence_batch(length: int = 3) -> list[Trajectory]:
    prompt, reply = [5, 6, 7], list(range(100, 100 + length))
    return [Trajectory(task_id="t", group_id="g", token_ids=prompt + reply, loss_mask=[0] * 3 + [1] * length,
                       behaviour_logprobs=[0.0] * 3 + [-5.0] * length, policy_versions=[-1] * 3 + [0] * length, reward=1.0)]


def test_the_learner_counts_optimizer_steps(tiny_model):
    """ppo_epochs 2 x minibatches 1 = 2 optimizer steps per train step: 2 train steps with warmup 1
    are 4 optimizer steps with warmup 2, the cosine decaying over optimizer steps 2..4."""
    algo = AlgoConfig(lr=1e-3, lr_schedule="cosine", warmup_steps=1, ppo_epochs=2)
    learner = Learner(tiny_model, algo, 1.0, micro_batch_size=4, total_steps=2)
    assert [learner.lr_at(step, update) for step in (0, 1) for update in (0, 1)] == pytest.approx([5e-4, 1e-3, 1e-3, 5e-4])
    for step, last_lr in ((0, 1e-3), (1, 5e-4)):
        metrics = learner.train_step(one_sequence_batch(), [1.0], step)
        assert metrics["train/lr"] == pytest.approx(last_lr)
        assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(last_lr)  # the rate it stepped with


def test_a_decaying_schedule_needs_the_run_length(tiny_model):
    with pytest.raises(ValueError, match="total_steps"):
        Learner(tiny_model, AlgoConfig(lr_schedule="linear"), 1.0, micro_batch_size=4)
    assert Learner(tiny_model, AlgoConfig(warmup_steps=3), 1.0, micro_batch_size=4).lr_at(1) == pytest.approx(2e-4 * 2 / 3)


def schedule_config(model_dir: Path, run_dir: Path):
    return load_config(None, [
        f"model.name={model_dir}", "env.name=toy", "env.train_size=8", "rollout.prompts_per_step=2", "rollout.n=4",
        "rollout.max_new_tokens=6", "rollout.temperature=1.0", "eval.size=0", "output.progress=false", "output.plot=false",
        f"output.run_dir={run_dir}", "model.lora.enabled=false", "algo.lr=1e-2", "algo.lr_schedule=cosine",
        "algo.warmup_steps=2", "train.steps=4", "output.checkpoint_every=2",
    ])


def test_resume_continues_the_same_lr_sequence(tmp_path, tiny_model_dir):
    """Killed after step 3 was logged but before its checkpoint: the resumed run redoes steps 3 and
    4 at the rates of the run that never stopped (the optimizer state it loads still holds step
    2's rate), and ends with the same weights."""
    run_dir = tmp_path / "run"
    config = schedule_config(tiny_model_dir, run_dir)
    train(config, run_dir)
    # warmup 1e-2 / 2, 1e-2; cosine over steps 2..4: 1e-2 at step 2, its midpoint 5e-3 at step 3
    expected = [5e-3, 1e-2, 1e-2, 5e-3]
    assert [row["train/lr"] for row in read_metrics(run_dir / "metrics.jsonl")] == pytest.approx(expected)
    root = run_dir / "checkpoints"
    final = torch.load(root / "step_000004" / "weights.pt", weights_only=True)
    for path in (root / "step_000004").iterdir():
        path.unlink()
    (root / "step_000004").rmdir()
    (root / "latest").write_text("step_000002")

    train(config, run_dir, resume=True)
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert [row["train/lr"] for row in rows] == pytest.approx(expected)
    redone = torch.load(root / "step_000004" / "weights.pt", weights_only=True)
    assert max((final[k] - redone[k]).abs().max().item() for k in final) < 1e-6
