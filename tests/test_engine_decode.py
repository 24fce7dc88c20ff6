"""The lean decode step (engines/decode.py) against transformers' own forward.

Llama-shaped models decode through it; its logits must equal the plain forward's on the same
cache, with left padding, grouped-query attention and (Qwen2) projection biases. Other models,
and models whose projections are wrapped (LoRA), keep transformers' forward.
"""
from __future__ import annotations

import copy

import pytest
import torch
import transformers
from transformers.cache_utils import Cache

from rlyard.engines import HFEngine
from rlyard.engines.decode import LeanDecoder, lean_decode_support
from rlyard.engines.hf import PreallocatedLayer, common_prefix_length
from rlyard.orchestrate.rollout import render_prompt
from rlyard.types import SamplingParams
from tests.test_engine import check_greedy_matches_reference, check_logprobs_match


def tiny(config_class, vocab_size: int, **extra):
    config = config_class(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **extra)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # random biases, so that a dropped bias would show
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.5)
    return model


@pytest.fixture(params=["llama", "qwen2"])
def llama_shaped(request, tokenizer):
    if request.param == "llama":
        from conftest import make_tiny_llama

        return make_tiny_llama(len(tokenizer))
    return tiny(transformers.Qwen2Config, len(tokenizer), use_sliding_window=False)


@pytest.fixture
def ragged_prompts(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(t) for t in ("What is 12+30?", "Hi", "Count to five, slowly please.")]


def left_padded_prefill(model, prompts, pad: int):
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    cache = Cache(layers=[PreallocatedLayer(width + 8) for _ in range(model.config.num_hidden_layers)])
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=attention, position_ids=(attention.cumsum(-1) - 1).clamp(min=0),
                    cache=cache, use_cache=True, logits_to_keep=1)
    return out.cache, out.logits[:, -1].argmax(-1), attention


def test_lean_step_equals_the_transformers_forward(llama_shaped, ragged_prompts, tokenizer):
    assert lean_decode_support(llama_shaped) is None
    decoder = LeanDecoder(llama_shaped)
    theirs_cache, tokens, attention = left_padded_prefill(llama_shaped, ragged_prompts, tokenizer.pad_token_id)
    ours_cache = copy.deepcopy(theirs_cache)
    positions = attention.sum(-1)
    for _ in range(3):
        attention = torch.cat([attention, torch.ones(len(ragged_prompts), 1, dtype=torch.long)], dim=1)
        with torch.no_grad():
            theirs = llama_shaped(input_ids=tokens[:, None], attention_mask=attention, position_ids=positions[:, None],
                                  cache=theirs_cache, use_cache=True).logits[:, -1]
            ours = decoder.forward(ours_cache, tokens[:, None], positions[:, None], attention.bool())
        assert (ours - theirs).abs().max() < 1e-5
        tokens, positions = theirs.argmax(-1), positions + 1


@pytest.mark.parametrize("chat", [False, True], ids=["raw", "chat"])
def test_engine_on_a_llama_shaped_model_is_exact(llama_shaped, ragged_prompts, tokenizer, chat):
    """Chat prompts share the template's prefix: their tails are prefilled by the lean forward too."""
    if chat:
        ragged_prompts = [render_prompt(tokenizer, [{"role": "user", "content": tokenizer.decode(p)}]) for p in ragged_prompts]
        assert common_prefix_length(ragged_prompts) > 5
    engine = HFEngine(llama_shaped, tokenizer.pad_token_id)
    assert engine.decoder is not None
    check_greedy_matches_reference(engine, llama_shaped, ragged_prompts)
    groups = engine.generate(ragged_prompts, SamplingParams(temperature=0.8, max_new_tokens=6, seed=1), n=3)
    check_logprobs_match(llama_shaped, ragged_prompts, groups, 0.8)


def test_other_models_keep_the_transformers_forward(tokenizer, tiny_model, ragged_prompts):
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=4)).eval()
    assert "model_type 'gpt2'" in lean_decode_support(gpt2)
    engine = HFEngine(gpt2, tokenizer.pad_token_id)
    assert engine.decoder is None
    check_greedy_matches_reference(engine, gpt2, ragged_prompts)
    with pytest.raises(ValueError, match="int8 needs a llama-shaped model.*gpt2"):
        HFEngine(gpt2, tokenizer.pad_token_id, quantize="int8")

    from peft import LoraConfig, get_peft_model

    wrapped = get_peft_model(copy.deepcopy(tiny_model), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert lean_decode_support(wrapped) is not None
    assert HFEngine(wrapped, tokenizer.pad_token_id).decoder is None
