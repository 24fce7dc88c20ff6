"""`orchestrate.backend=ray` with `rollout.engine=vllm`: a vLLM engine inside a rollout actor,
the LoRA adapter's weights sent to it through the object store every step.

Runs only where both vLLM and Ray are importable (the virtualenv of scripts/setup_vllm.sh,
which installs Ray too):

    .venv-vllm/bin/python -m pytest tests/test_ray_vllm.py
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm")
ray = pytest.importorskip("ray")

from rlyard.config import load_config  # noqa: E402
from rlyard.orchestrate.sync import train  # noqa: E402

pytestmark = pytest.mark.timeout(900)


def test_sync_grpo_on_ray_with_a_vllm_rollout_actor(tmp_path):
    run_dir = tmp_path / "run"
    config = load_config("configs/quickstart.yaml", [
        "train.steps=2", "rollout.prompts_per_step=2", "rollout.n=4", "rollout.max_new_tokens=16", "eval.size=0",
        "rollout.engine=vllm", "rollout.engine_options={max_model_len: 512}", "output.progress=false", "output.plot=false",
        f"output.run_dir={run_dir}", "orchestrate.backend=ray", "orchestrate.ray.rollout_workers=1", "orchestrate.ray.graders=0",
        "orchestrate.ray.learner_cpus=1", "orchestrate.ray.rollout_cpus=1",
    ])
    assert train(config, run_dir).steps == 2
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "loss/policy" in m]
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        # step 2 was sampled by the adapter trained in step 1: a stale or missing adapter would be
        # off by far more than fp32 kernels differ
        print(f"[ray-vllm] step {m['step']}: tis_weight_mean {m['train/tis_weight_mean']:.6f}, reward {m['reward/mean']:.3f}")
        assert m["train/tis_weight_mean"] == pytest.approx(1.0, abs=1e-3), m
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 4
