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
from rlyard.orchestrate.entry import train  # noqa: E402

pytestmark = pytest.mark.timeout(900)
DATA = Path(__file__).parent / "data"


def test_sync_grpo_on_ray_with_a_vllm_rollout_actor(tmp_path):
    run_dir = tmp_path / "run"
    config = load_config("configs/quickstart.yaml", [
        "env.name=dataset", f"env.options.path={DATA / 'gsm8k_test_head30.jsonl'}", "env.options.prompt_column=question",
        f"env.reward={DATA / 'vowel_reward.py'}:vowel_share", "rollout.truncated_reward=null", "algo.lr=5e-3", "train.steps=2",
        "rollout.prompts_per_step=2", "rollout.n=4", "rollout.max_new_tokens=16", "eval.size=0",
        "rollout.engine=vllm", "rollout.engine_options={max_model_len: 512}", "output.progress=false", "output.plot=false",
        f"output.run_dir={run_dir}", "orchestrate.backend=ray", "orchestrate.ray.rollout_workers=1", "orchestrate.ray.graders=0",
        "orchestrate.ray.learner_cpus=1", "orchestrate.ray.rollout_cpus=1",
    ])
    assert train(config, run_dir).steps == 2
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "loss/policy" in m]
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        # step 2 was sampled by the adapter trained in step 1 (the dense reward trains every step):
        # fp32 kernels differ by ~1e-5 nats a token, a stale or missing adapter by far more
        print(f"[ray-vllm] step {m['step']}: logprob gap {m['train/logprob_mismatch']:.2e} (max "
              f"{m['train/logprob_mismatch_max']:.2e}), tis_weight_mean {m['train/tis_weight_mean']:.6f}, reward {m['reward/mean']:.3f}")
        assert 0.0 < m["train/logprob_mismatch"] < 1e-4, m
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 4
