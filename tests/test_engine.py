"""HFEngine on a tiny random llama with the real SmolLM2 tokenizer.

The behaviour logprobs the engine reports must be what the learner recomputes (prefix-sharing
path) and what a plain full forward of prompt + completion gives, for a batch of prompts of
different lengths (left padding), n > 1, and rows that leave the batch early.
"""
from __future__ import annotations

import math

import pytest
import torch

from rlyard.engines import HFEngine
from rlyard.engines.hf import common_prefix_length
from rlyard.orchestrate.rollout import render_prompt
from rlyard.train.logprobs import continuation_logprobs
from rlyard.types import SamplingParams

TOL = 1e-4


@pytest.fixture
def prompts(tokenizer) -> list[list[int]]:
    """Three prompts of clearly different lengths: two chat prompts and a short raw one."""
    long = render_prompt(tokenizer, [{"role": "user", "content": "What is 37+45? Think step by step, then give the answer."}])
    short = render_prompt(tokenizer, [{"role": "user", "content": "Hi"}])
    raw = tokenizer.encode("Hello there")
    lengths = [len(long), len(short), len(raw)]
    assert len(set(lengths)) == 3 and min(lengths) < 5, lengths
    return [long, short, raw]


@pytest.fixture
def engine(tiny_model, tokenizer) -> HFEngine:
    return HFEngine(tiny_model, tokenizer.pad_token_id)


@torch.no_grad()
def full_forward_logprobs(model, prompt: list[int], completion: list[int], temperature: float) -> torch.Tensor:
    """log softmax(logits / T) of each completion token from one unpadded forward of prompt + completion."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def check_logprobs_match(model, prompts, groups, temperature):
    """Engine logprobs == learner's continuation_logprobs == full forward, per prompt group."""
    worst = 0.0
    for prompt, group in zip(prompts, groups):
        continuations = [c.token_ids for c in group]
        with torch.no_grad():
            learner = continuation_logprobs(model, prompt, continuations, [[1] * len(c) for c in continuations], temperature)
        for completion, learned in zip(group, learner.logprobs):
            engine_lp = torch.tensor(completion.logprobs)
            assert engine_lp.shape == learned.shape == (len(completion.token_ids),)
            full = full_forward_logprobs(model, prompt, completion.token_ids, temperature)
            worst = max(worst, (engine_lp - learned).abs().max().item(), (engine_lp - full).abs().max().item(),
                        (learned - full).abs().max().item())
    assert worst < TOL, worst
    return worst


def test_engine_logprobs_equal_learner_and_full_forward(engine, tiny_model, prompts):
    params = SamplingParams(temperature=0.7, max_new_tokens=6, seed=123)
    groups = engine.generate(prompts, params, n=3)
    assert len(groups) == 3 and all(len(g) == 3 for g in groups)
    for group in groups:
        for completion in group:
            assert len(completion.token_ids) == 6 and completion.finish_reason == "length"
            assert all(lp <= 0.0 for lp in completion.logprobs)
    # the three samples of a prompt are not copies of each other
    assert len({tuple(c.token_ids) for c in groups[0]}) > 1
    check_logprobs_match(tiny_model, prompts, groups, 0.7)


def test_logprobs_still_exact_after_rows_leave_the_batch(engine, tiny_model, prompts):
    """A stop token ends one row early; the shrunken batch (cache rows dropped) stays exact."""
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=7)
    first = engine.generate(prompts, params, n=2)
    stop = first[0][0].token_ids[2]  # what row 0 samples third, at a step where every row is live
    assert all(stop not in c.token_ids[:3] for g in first for c in g if c is not first[0][0])
    second = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=6, seed=7, stop_token_ids=(stop,)), n=2)
    stopped = second[0][0]
    assert stopped.token_ids == first[0][0].token_ids[:3]  # same draws until it stopped, stop token included
    assert stopped.finish_reason == "stop" and stopped.token_ids[-1] == stop
    assert [c.finish_reason for g in second for c in g].count("length") >= 4
    check_logprobs_match(tiny_model, prompts, second, 1.0)


def test_same_seed_same_tokens_different_seed_different_tokens(engine, prompts):
    params = SamplingParams(temperature=1.0, max_new_tokens=5, seed=2024)
    a = engine.generate(prompts, params, n=2)
    b = engine.generate(prompts, params, n=2)
    c = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=5, seed=2025), n=2)
    tokens = lambda groups: [x.token_ids for g in groups for x in g]  # noqa: E731
    assert tokens(a) == tokens(b)
    assert [x.logprobs for g in a for x in g] == [x.logprobs for g in b for x in g]
    assert tokens(a) != tokens(c)


@torch.no_grad()
def greedy_reference(model, prompt: list[int], steps: int) -> tuple[list[int], list[float]]:
    """Greedy decoding by a full forward of the whole sequence at every step (no cache, no padding)."""
    ids, logprobs = list(prompt), []
    for _ in range(steps):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
        token = int(logits.argmax())
        logprobs.append(float(torch.log_softmax(logits, -1)[token]))
        ids.append(token)
    return ids[len(prompt):], logprobs


def check_greedy_matches_reference(engine, model, prompts, steps: int = 5) -> None:
    groups = engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=steps), n=2)
    for prompt, group in zip(prompts, groups):
        expected_tokens, expected_logprobs = greedy_reference(model, prompt, steps)
        for completion in group:
            assert completion.token_ids == expected_tokens
            assert completion.logprobs == pytest.approx(expected_logprobs, abs=TOL)


def test_greedy_equals_stepwise_argmax(engine, tiny_model, prompts):
    check_greedy_matches_reference(engine, tiny_model, prompts)


def test_top_k_one_equals_greedy(engine, tiny_model, prompts):
    greedy = engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=4), n=1)
    topk = engine.generate(prompts, SamplingParams(temperature=0.8, top_k=1, max_new_tokens=4, seed=5), n=2)
    for prompt, g, group in zip(prompts, greedy, topk):
        for completion in group:
            assert completion.token_ids == g[0].token_ids
            # the reported logprob is still that of the full distribution at T = 0.8
            full = full_forward_logprobs(tiny_model, prompt, completion.token_ids, 0.8)
            assert completion.logprobs == pytest.approx(full.tolist(), abs=TOL)


def test_stop_token_ends_with_stop_and_length_otherwise(engine, prompts):
    """Greedy rows: the chat prompts' first token is made a stop token; the raw prompt never emits it."""
    greedy = engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=6), n=1)
    stop = greedy[1][0].token_ids[0]
    assert stop not in greedy[2][0].token_ids
    out = engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=6, stop_token_ids=(stop, 0)), n=2)
    for row in (0, 1):
        if greedy[row][0].token_ids[0] == stop:
            for completion in out[row]:
                assert completion.token_ids == [stop] and completion.finish_reason == "stop"
                assert completion.logprobs == pytest.approx(greedy[row][0].logprobs[:1], abs=TOL)
    assert all(c.finish_reason == "stop" for c in out[1])
    for completion in out[2]:  # never hits a stop token: runs to max_new_tokens
        assert completion.finish_reason == "length" and completion.token_ids == greedy[2][0].token_ids
        assert len(completion.token_ids) == 6


def test_update_weights_copies_and_bumps_version(engine, tiny_model, prompts):
    assert engine.policy_version == 0
    new_norm = torch.full_like(tiny_model.model.norm.weight, 2.5)
    new_q = torch.randn_like(tiny_model.model.layers[0].self_attn.q_proj.weight)
    engine.update_weights(3, {"model.norm.weight": new_norm, "model.layers.0.self_attn.q_proj.weight": new_q})
    assert engine.policy_version == 3
    assert torch.equal(engine.model.model.norm.weight, new_norm)
    assert torch.equal(engine.model.model.layers[0].self_attn.q_proj.weight, new_q)
    assert new_norm.data_ptr() != engine.model.model.norm.weight.data_ptr()  # copied, not aliased
    out = engine.generate(prompts[:1], SamplingParams(temperature=1.0, max_new_tokens=2, seed=0), n=2)
    assert [c.policy_version for c in out[0]] == [3, 3]
    # without a state dict only the version moves
    engine.update_weights(4)
    assert engine.policy_version == 4 and torch.equal(engine.model.model.norm.weight, new_norm)


def test_update_weights_unknown_key_raises_and_changes_nothing(engine, tiny_model):
    before = tiny_model.model.norm.weight.detach().clone()
    with pytest.raises(KeyError, match="no_such.weight"):
        engine.update_weights(1, {"model.norm.weight": before * 3, "no_such.weight": torch.zeros(2)})
    assert engine.policy_version == 0
    assert torch.equal(tiny_model.model.norm.weight, before)


def test_generate_rejects_empty_prompt(engine):
    assert engine.generate([], SamplingParams()) == []
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate([[1, 2], []], SamplingParams(max_new_tokens=1))


def test_update_weights_accepts_a_full_state_dict_of_a_tied_model(engine, tiny_model, tokenizer, prompts):
    from conftest import make_tiny_llama

    other = make_tiny_llama(len(tokenizer))
    with torch.no_grad():
        other.model.norm.weight.mul_(3.0)
        other.lm_head.weight.add_(0.05)  # tied: this is also the input embedding
    state = other.state_dict()
    assert "lm_head.weight" in state and other.config.tie_word_embeddings
    engine.update_weights(1, state)
    assert torch.equal(tiny_model.lm_head.weight, other.lm_head.weight)
    assert torch.equal(tiny_model.model.norm.weight, other.model.norm.weight)


def test_sample_top_k_and_top_p_restrict_draws_but_not_the_logprob():
    from rlyard.engines.hf import sample

    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]]).repeat(400, 1)
    probs = [math.exp(v) for v in (3.0, 2.0, 1.0, 0.0, -1.0)]
    probs = [p / sum(probs) for p in probs]  # 0.636, 0.234, 0.086, 0.032, 0.012
    full_logprobs = [math.log(p) for p in probs]
    g = torch.Generator().manual_seed(0)

    chosen, logprobs = sample(logits, SamplingParams(temperature=1.0, top_k=2), g)
    assert set(chosen.tolist()) == {0, 1}
    assert logprobs.tolist() == pytest.approx([full_logprobs[c] for c in chosen.tolist()], abs=1e-6)

    # nucleus 0.8: token 0 (0.636) does not reach it, token 1 crosses it (0.870) and is kept
    chosen, logprobs = sample(logits, SamplingParams(temperature=1.0, top_p=0.8), g)
    assert set(chosen.tolist()) == {0, 1}
    share = chosen.eq(0).float().mean().item()
    assert abs(share - probs[0] / (probs[0] + probs[1])) < 0.08  # renormalised over the nucleus: 0.731

    # temperature 2: the reported logprob is log softmax(logits / 2) over the full vocabulary
    chosen, logprobs = sample(logits[:8], SamplingParams(temperature=2.0), g)
    half = [math.exp(v / 2) for v in (3.0, 2.0, 1.0, 0.0, -1.0)]
    assert logprobs.tolist() == pytest.approx([math.log(half[c] / sum(half)) for c in chosen.tolist()], abs=1e-6)


@pytest.fixture
def chat_prompts(tokenizer) -> list[list[int]]:
    """Distinct chat prompts of different lengths that share the template's system-prompt prefix."""
    texts = ["What is 37+45?", "Hi", "Name three prime numbers greater than ten, please."]
    return [render_prompt(tokenizer, [{"role": "user", "content": t}]) for t in texts]


def test_common_prefix_length():
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert common_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # each prompt keeps its last token to prefill
    assert common_prefix_length([[7, 1], [8, 1]]) == 0
    assert common_prefix_length([[1, 2, 3]]) == 0  # one prompt: nothing to share


def test_shared_prefix_prefill_is_exact(engine, tiny_model, chat_prompts):
    """The common system prefix is prefilled once and the rest left-padded after it: the same
    greedy tokens as a cache-free reference, and sampled logprobs equal to the learner's."""
    assert common_prefix_length(chat_prompts) > 10
    check_greedy_matches_reference(engine, tiny_model, chat_prompts)
    sampled = engine.generate(chat_prompts, SamplingParams(temperature=0.9, max_new_tokens=6, seed=11), n=3)
    check_logprobs_match(tiny_model, chat_prompts, sampled, 0.9)
