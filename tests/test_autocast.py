"""bf16 on the paths that pay for it: `model.autocast` (SFT and the learner: bf16 matmuls over
float32 weights) and `rollout.dtype` (the engine's own bf16 copy of the weights).

Each path must really run in bf16 (its numbers move off the float32 ones) and stay within bf16's
rounding of them; the trained weights and their gradients stay float32, so AdamW's state keeps
full precision, and every weight push reaches the bf16 engine.
"""
from __future__ import annotations

import copy

import pytest
import torch

from rlyard.config import AlgoConfig, ConfigError, load_config
from rlyard.engines import HFEngine
from rlyard.models.lora import merged_weights
from rlyard.orchestrate.rollout import render_prompt
from rlyard.sft.batching import Example
from rlyard.sft.train import token_nll
from rlyard.train import Learner
from rlyard.types import SamplingParams, Trajectory
from tests.test_engine import full_forward_logprobs

BF16 = torch.bfloat16


@pytest.fixture
def prompt(tokenizer) -> list[int]:
    return render_prompt(tokenizer, [{"role": "user", "content": "What is 37+45? Think step by step, then give the answer."}])


@pytest.mark.parametrize("how", ["autocast", "bf16 weights"])
def test_engine_logprobs_in_bf16_are_float32_ones_to_bf16_rounding(tiny_model, tokenizer, prompt, how):
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=4)
    exact = HFEngine(tiny_model, tokenizer.pad_token_id).generate([prompt], params)[0][0]
    if how == "autocast":
        mixed_engine = HFEngine(tiny_model, tokenizer.pad_token_id, autocast_dtype=BF16)
    else:
        mixed_engine = HFEngine(copy.deepcopy(tiny_model).to(BF16), tokenizer.pad_token_id)
    mixed = mixed_engine.generate([prompt], params)[0][0]
    reference = full_forward_logprobs(tiny_model, prompt, mixed.token_ids, 1.0)
    gap = (torch.tensor(mixed.logprobs) - reference).abs().max().item()
    assert 0.0 < gap < 0.1, gap
    assert torch.tensor(exact.logprobs) == pytest.approx(full_forward_logprobs(tiny_model, prompt, exact.token_ids, 1.0), abs=1e-4)


def test_sft_nll_in_bf16_is_close_and_its_gradients_are_float32(tiny_model, prompt):
    example = Example(token_ids=prompt + [300, 301, 302, 2], loss_mask=[0] * len(prompt) + [1] * 4, source="hand")
    exact, count = token_nll(tiny_model, [example])
    mixed, _ = token_nll(tiny_model, [example], BF16)
    assert count == 4
    assert 0.0 < abs(mixed.item() - exact.item()) < 0.02 * abs(exact.item())
    mixed.backward()
    assert all(p.dtype == torch.float32 and (p.grad is None or p.grad.dtype == torch.float32) for p in tiny_model.parameters())


def test_learner_step_in_bf16_moves_the_weights_like_float32(tiny_model, prompt):
    reply = [300, 301, 302, 2]
    traj = Trajectory(task_id="t", group_id="g", token_ids=prompt + reply, loss_mask=[0] * len(prompt) + [1] * 4,
                      behaviour_logprobs=[0.0] * len(prompt) + [-10.0] * 4, policy_versions=[-1] * len(prompt) + [0] * 4,
                      reward=1.0)
    moved = []
    for precision in (None, BF16):
        model = copy.deepcopy(tiny_model)
        before = model.lm_head.weight.detach().clone()
        metrics = Learner(model, AlgoConfig(lr=1e-3), 1.0, micro_batch_size=4, autocast_dtype=precision).train_step([traj], [1.0])
        assert model.lm_head.weight.dtype == torch.float32 and metrics["loss/grad_norm"] > 0
        moved.append(model.lm_head.weight.detach() - before)
    exact, mixed = moved
    cosine = torch.nn.functional.cosine_similarity(exact.flatten(), mixed.flatten(), dim=0).item()
    assert not torch.equal(exact, mixed) and cosine > 0.99, cosine


def test_a_bf16_engine_and_int8_are_refused_together():
    with pytest.raises(ConfigError, match="rollout.quantize"):
        load_config(None, ["rollout.dtype=bfloat16", "rollout.quantize=int8"])
    config = load_config(None, ["model.autocast=bfloat16", "rollout.quantize=int8"])
    assert (config.model.autocast, config.rollout.quantize) == ("bfloat16", "int8")


@pytest.mark.parametrize("lora", [True, False])
def test_a_bf16_engine_gets_its_own_copy_and_every_push_cast_to_bf16(tiny_model_dir, tmp_path, lora):
    from rlyard.orchestrate.setup import build, push_weights
    from rlyard.orchestrate.entry import train
    from tests.test_zoo_train import QUICKSTART, tiny_overrides

    overrides = tiny_overrides(tiny_model_dir, tmp_path / "run", "rollout.dtype=bfloat16", "model.autocast=bfloat16",
                               f"model.lora.enabled={str(lora).lower()}")
    config = load_config(QUICKSTART, overrides)
    c = build(config)
    assert c.engine.model is not c.model and next(c.engine.model.parameters()).dtype == BF16
    assert next(p for p in c.model.parameters() if p.requires_grad).dtype == torch.float32
    with torch.no_grad():
        for param in c.model.parameters():
            if param.requires_grad:
                param.add_(0.01)
    push_weights(c, 1)
    learner_weights = merged_weights(c.model) if lora else dict(c.model.named_parameters())
    engine_weights = dict(c.engine.model.named_parameters())
    for name, weight in learner_weights.items():
        assert torch.equal(engine_weights[name], weight.detach().to(BF16)), name
    result = train(config, tmp_path / "run")
    assert result.steps == 2


def test_a_bf16_engine_under_a_float32_learner_gets_tis_by_default():
    from rlyard.config import training_algo

    assert training_algo(load_config(None, ["rollout.dtype=bfloat16"])).tis_cap == 2.0
    assert training_algo(load_config(None, ["rollout.dtype=bfloat16", "algo.tis_cap=4"])).tis_cap == 4.0
    assert training_algo(load_config(None, ["rollout.dtype=float32"])).tis_cap is None  # the learner's own dtype
    assert training_algo(load_config(None, ["model.dtype=bfloat16"])).tis_cap is None  # engine follows model.dtype


@pytest.mark.parametrize("flags, expected", [(set(), "float32"), ({"avx2", "fma"}, "float32"),
                                             ({"avx2", "amx_bf16"}, "bfloat16"), ({"avx512_bf16"}, "bfloat16")])
def test_an_auto_engine_dtype_is_bf16_only_where_the_cpu_has_it(monkeypatch, flags, expected):
    """On an AVX2 CPU a bf16 engine is emulated: 6x slower prefill, 2x slower decode than float32."""
    import rlyard.models.loading as loading
    from rlyard.config import engine_dtype, training_algo

    monkeypatch.setattr(loading, "cpu_flags", lambda: flags)
    config = load_config(None, ["rollout.dtype=auto"])
    assert engine_dtype(config) == expected
    assert (training_algo(config).tis_cap == 2.0) == (expected == "bfloat16")  # an engine off the learner's dtype gets TIS
    chosen, why = loading.engine_dtype_choice("auto", "float32", "cpu")
    assert chosen == expected and f"chose {expected}" in why
    assert loading.engine_dtype_choice(None, "float32", "cpu")[0] == "float32"
    assert loading.engine_dtype_choice("bfloat16", "float32", "cpu")[0] == "bfloat16"  # named: taken as it is
