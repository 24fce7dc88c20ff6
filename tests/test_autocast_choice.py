"""`model.autocast: auto`, TIS for a bf16 learner, and loss_agg=constant's normaliser (issue 37, items 5, 6, 9).

The detection is tested with both answers of a monkeypatched capability: this machine's own CPU
is never assumed.
"""
from __future__ import annotations

import pytest
import torch

from rlyard.config import load_config, loss_constant, training_algo
from rlyard.models import loading
from rlyard.models.loading import autocast_choice

CONFIGS = loading.Path(__file__).resolve().parent.parent / "configs"


@pytest.fixture(params=[True, False], ids=["native-bf16", "emulated-bf16"])
def cpu_bf16(request, monkeypatch) -> bool:
    """This process's CPU as one with (avx512_bf16) or without native bf16."""
    flags = {"fpu", "sse2", "avx2", "avx512f"} | ({"avx512_bf16"} if request.param else set())
    monkeypatch.setattr(loading, "cpu_flags", lambda: flags)
    return request.param


def test_auto_picks_bf16_only_on_a_cpu_that_has_it_and_says_so(cpu_bf16):
    dtype, said = autocast_choice("auto", "cpu")
    assert dtype == (torch.bfloat16 if cpu_bf16 else None)
    assert ("chose bfloat16" in said and "avx512_bf16" in said) if cpu_bf16 else ("chose none" in said and "neither" in said)
    assert autocast_choice("bfloat16", "cpu")[0] == torch.bfloat16 and autocast_choice("none", "cpu")[0] is None  # as written


@pytest.mark.parametrize("flag", ["amx_bf16", "avx512_bf16"])
def test_either_cpu_flag_is_native_bf16(monkeypatch, flag):
    monkeypatch.setattr(loading, "cpu_flags", lambda: {"avx2", flag})
    assert autocast_choice("auto", "cpu")[0] == torch.bfloat16


@pytest.mark.parametrize("supported", [True, False])
def test_auto_on_a_gpu_asks_cuda(monkeypatch, supported):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: supported)
    dtype, said = autocast_choice("auto", "cuda")
    assert dtype == (torch.bfloat16 if supported else None) and f"is {supported}" in said


def test_the_agentic_quickstart_uses_auto():
    config = load_config(CONFIGS / "agentic_quickstart.yaml")
    assert config.model.autocast == "auto"


def test_a_bf16_learner_gets_tis_by_default(cpu_bf16):
    """model.autocast=bfloat16 alone puts the same sampler/learner gap as a bf16 engine: TIS at 2."""
    assert training_algo(load_config(None, ["model.autocast=bfloat16"])).tis_cap == 2.0
    assert training_algo(load_config(None, ["model.autocast=bfloat16", "algo.tis_cap=3"])).tis_cap == 3.0
    assert training_algo(load_config(None, ["model.autocast=none"])).tis_cap is None
    # auto: TIS exactly when it picks bf16
    assert training_algo(load_config(None, ["model.autocast=auto"])).tis_cap == (2.0 if cpu_bf16 else None)


def test_loss_agg_constant_normalises_by_the_episode_budget_multi_turn():
    config = load_config(None, ["algo.loss_agg=constant", "rollout.max_new_tokens=64", "agent.max_total_tokens=1024",
                                "agent.max_tokens_per_turn=64"])
    assert loss_constant(config, multi_turn=False) == 64
    assert loss_constant(config, multi_turn=True) == 1024
    named = load_config(None, ["algo.loss_agg=constant", "algo.loss_constant=300"])
    assert loss_constant(named, multi_turn=True) == 300 and loss_constant(named) == 300


def test_the_run_builds_its_learner_with_the_episode_budget(tiny_model_dir, tmp_path):
    """What build() hands the learner for a multi-turn family (it was rollout.max_new_tokens)."""
    from rlyard.orchestrate.setup import build

    overrides = [f"model.name={tiny_model_dir}", "env.name=files", "env.train_size=4", "eval.size=0", "algo.loss_agg=constant",
                 "rollout.max_new_tokens=32", "agent.max_total_tokens=700", "model.autocast=none"]
    c = build(load_config(None, overrides))
    assert c.learner.loss_constant == 700
