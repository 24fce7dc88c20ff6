"""int8 rollouts (rollout.quantize=int8): calibration, the logprob gap, re-quantization on push, config.

The engine's first batch runs in fp32 and measures the smoothing scales; later decode steps run
on fbgemm int8 kernels. Their logprobs differ a little from the fp32 trainer's, which is what
the learner's TIS weight corrects; each weight push must re-quantize what it changed.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch
import transformers

from rlyard.config import ConfigError, load_config, training_algo
from rlyard.engines import HFEngine
from rlyard.engines.quant import Int8Projection, Projection
from rlyard.orchestrate.rollout import render_prompt
from rlyard.orchestrate.entry import train
from rlyard.train.logprobs import continuation_logprobs
from rlyard.types import SamplingParams
from tests.test_zoo_train import QUICKSTART, read_jsonl, tiny_overrides


@pytest.fixture
def chat_prompts(tokenizer) -> list[list[int]]:
    return [render_prompt(tokenizer, [{"role": "user", "content": t}]) for t in ("What is 12+30?", "Hello", "Count to five.")]


def logprob_gap(model, prompts, groups, temperature) -> torch.Tensor:
    """|engine logprob - fp32 recompute| of every sampled token."""
    gaps = []
    with torch.no_grad():
        for prompt, group in zip(prompts, groups):
            tokens = [c.token_ids for c in group]
            exact = continuation_logprobs(model, prompt, tokens, [[1] * len(t) for t in tokens], temperature, with_entropy=False)
            gaps += [(torch.tensor(c.logprobs) - lp).abs() for c, lp in zip(group, exact.logprobs)]
    return torch.cat(gaps)


def test_first_batch_calibrates_in_fp32_then_decodes_in_int8(tiny_model, tokenizer, chat_prompts):
    engine = HFEngine(copy.deepcopy(tiny_model), tokenizer.pad_token_id, quantize="int8")
    layers = engine.decoder.int8_projections  # per layer: q/k/v fused, o, gate/up fused, down; then the head
    assert len(layers) == 2 * 4 + 1 and all(isinstance(layer, Int8Projection) for layer in layers)
    assert [len(layer.linears) for layer in layers[:4]] == [3, 1, 2, 1]

    params = SamplingParams(temperature=0.9, max_new_tokens=8, seed=3)
    first = engine.generate(chat_prompts, params, n=2)  # fp32 while measuring: exact logprobs
    assert logprob_gap(tiny_model, chat_prompts, first, 0.9).max() < 1e-4
    assert all(layer.packed is not None and bool((layer.input_absmax > 0).all()) for layer in layers)

    second = engine.generate(chat_prompts, params, n=2)
    gap = logprob_gap(tiny_model, chat_prompts, second, 0.9)
    assert 1e-4 < gap.mean() < 0.05, gap.mean()  # int8 now, and close to the fp32 policy


def test_push_requantizes_changed_layers_and_the_tied_head(tiny_model, tokenizer, chat_prompts):
    engine = HFEngine(copy.deepcopy(tiny_model), tokenizer.pad_token_id, quantize="int8")
    params = SamplingParams(temperature=0.9, max_new_tokens=8, seed=5)
    engine.generate(chat_prompts, params, n=2)  # calibrate

    torch.manual_seed(1)
    new_model = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for name, param in new_model.named_parameters():
            param.add_(0.5 * param.abs().mean() * torch.randn_like(param))
    engine.update_weights(7, {name: p.detach() for name, p in new_model.named_parameters()})  # embed_tokens also feeds the tied head
    assert engine.policy_version == 7
    groups = engine.generate(chat_prompts, params, n=2)
    to_new, to_old = (logprob_gap(m, chat_prompts, groups, 0.9).mean() for m in (new_model, tiny_model))
    assert to_new < 0.05 and to_old > 4 * to_new, (to_new, to_old)  # sampling the pushed policy, not the old one

    head = engine.decoder.head
    before = head.packed.weight().dequantize().clone()
    engine.update_weights(8, {"model.embed_tokens.weight": 2 * new_model.model.embed_tokens.weight.detach()})
    assert torch.allclose(head.packed.weight().dequantize(), 2 * before, rtol=0.02, atol=1e-3)


def test_a_lora_push_with_factors_swaps_the_low_rank_term_and_never_repacks(tiny_model, tokenizer, chat_prompts):
    """With the factors, the first push re-packs the base (W - sBA) once; later pushes only swap
    the factors, and the engine samples the pushed policy as closely as a full re-pack does."""
    from rlyard.models import add_lora
    from rlyard.models.lora import lora_factors, merged_weights

    policy = add_lora(copy.deepcopy(tiny_model), 4, 8, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    with_factors, merged_only = (HFEngine(copy.deepcopy(tiny_model), tokenizer.pad_token_id, quantize="int8") for _ in range(2))
    assert with_factors.takes_lora_factors
    params = SamplingParams(temperature=0.9, max_new_tokens=8, seed=5)
    for engine in (with_factors, merged_only):
        engine.generate(chat_prompts, params, n=2)  # calibrate and pack
    layers = with_factors.decoder.int8_projections
    packs = {id(layer): layer.packed for layer in layers}
    repacked = []
    for layer in layers:
        layer.quantize = (lambda original, layer=layer: lambda: (repacked.append(layer), original())[1])(layer.quantize)

    torch.manual_seed(2)
    for version in (1, 2, 3):
        with torch.no_grad():
            for name, param in policy.named_parameters():
                if "lora_" in name:
                    param.add_(0.5 * torch.randn_like(param))  # B starts at 0: the adapter moves the policy from push 1
        repacked.clear()
        with_factors.update_weights(version, merged_weights(policy) | lora_factors(policy))
        merged_only.update_weights(version, merged_weights(policy))
        assert len(repacked) == (8 if version == 1 else 0), (version, len(repacked))  # not the head: no LoRA there
        assert all(layer.low_rank is not None for layer in layers[:8]) and layers[8].low_rank is None
        groups = with_factors.generate(chat_prompts, params, n=2)
        with policy.disable_adapter():
            to_base = logprob_gap(policy, chat_prompts, groups, 0.9).mean()
        to_policy = logprob_gap(policy, chat_prompts, groups, 0.9).mean()
        reference = logprob_gap(policy, chat_prompts, merged_only.generate(chat_prompts, params, n=2), 0.9).mean()
        assert to_policy < 0.05 and to_policy < 2 * reference + 1e-3 and to_base > 4 * to_policy, (version, to_policy, reference, to_base)
    assert all(layer.packed is packs[id(layer)] for layer in layers)  # the same fbgemm layers, re-packed in place at most once


def test_int8_needs_a_cpu_model_and_a_known_mode(tiny_model, tokenizer):
    with pytest.raises(ValueError, match="quantize must be one of"):
        HFEngine(copy.deepcopy(tiny_model), tokenizer.pad_token_id, quantize="int4")


def test_the_learner_gets_tis_for_int8_rollouts_and_the_config_stays_as_written():
    int8 = load_config(None, ["rollout.quantize=int8"])
    assert training_algo(int8).tis_cap == 2.0
    assert int8.algo.tis_cap is None  # the saved config.yaml keeps what the user wrote
    assert training_algo(load_config(None, ["rollout.quantize=int8", "algo.tis_cap=3"])).tis_cap == 3.0
    decoupled = training_algo(load_config(None, ["rollout.quantize=int8", "algo.decoupled=true"]))
    assert decoupled.decoupled and decoupled.tis_cap is None
    assert training_algo(load_config(None, [])).tis_cap is None
    with pytest.raises(ConfigError, match="rollout.quantize"):
        load_config(None, ["rollout.quantize=int4"])
    with pytest.raises(ConfigError, match="int8 runs on CPU"):
        load_config(None, ["rollout.quantize=int8", "model.device=cuda"])


@pytest.mark.parametrize("lora", ["true", "false"])
def test_sync_training_with_int8_rollouts(tmp_path, tiny_model_dir, lora):
    """LoRA pushes merged projections; full fine-tuning pushes everything (the engine gets its own copy)."""
    run_dir = tmp_path / f"int8-{lora}"
    config = load_config(QUICKSTART, tiny_overrides(tiny_model_dir, run_dir, "rollout.quantize=int8", f"model.lora.enabled={lora}",
                                                    "train.steps=3"))
    result = train(config, run_dir)
    rows = [row for row in read_jsonl(run_dir / "metrics.jsonl") if "train/tis_weight_mean" in row]
    assert len(rows) == 3 and result.steps == 3
    gaps = [row["train/logprob_mismatch"] for row in rows]  # 0 on a step whose groups all had equal rewards
    assert max(gaps) > 1e-4 and all(gap < 0.1 for gap in gaps), gaps
    trained = [row for row in rows if row["train/skipped_sequences"] < 1]
    assert trained and all(math.isfinite(row["loss/policy"]) and 0.5 < row["train/tis_weight_mean"] <= 2.0 for row in trained), rows


def test_int8_keeps_projection_biases(tokenizer, chat_prompts):
    """A Qwen2 model (q/k/v biases) decodes in int8 end to end; the unit test below checks the
    biases' arithmetic."""
    from tests.test_engine_decode import tiny

    qwen = tiny(transformers.Qwen2Config, len(tokenizer), use_sliding_window=False)
    engine = HFEngine(copy.deepcopy(qwen), tokenizer.pad_token_id, quantize="int8")
    params = SamplingParams(temperature=0.9, max_new_tokens=8, seed=3)
    engine.generate(chat_prompts, params, n=2)  # calibrate
    qkv = engine.decoder.int8_projections[0]
    assert qkv.packed is not None and qkv.bias is not None and qkv.bias.shape == (sum(qkv.sizes),)
    gap = logprob_gap(qwen, chat_prompts, engine.generate(chat_prompts, params, n=2), 0.9)
    assert 1e-4 < gap.mean() < 0.05, gap.mean()


def test_int8_projection_is_close_to_the_float_layers_it_fuses():
    torch.manual_seed(0)
    linears = [torch.nn.Linear(64, 48), torch.nn.Linear(64, 16), torch.nn.Linear(64, 16, bias=False)]
    with torch.no_grad():
        for linear in linears[:2]:
            linear.bias.normal_(0, 1.0)
    fused, exact = Int8Projection(linears), Projection(linears)
    x = torch.randn(8, 64) * torch.linspace(0.1, 8.0, 64)  # outlier channels, as SmoothQuant expects
    assert all(torch.equal(a, b) for a, b in zip(fused(x), exact(x)))  # calibrating: the float layers
    fused.quantize()
    for ours, theirs in zip(fused(x), exact(x)):
        assert ours.shape == theirs.shape
        assert (ours - theirs).abs().max() < 0.03 * theirs.abs().max()
