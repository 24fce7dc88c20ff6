"""Reusing a finished turn's KV cache (engines/prefix.py) must not change what the engine samples.

A later turn's prompt extends the sequence the engine finished; with the store on, only the new
tokens are prefilled. Its logprobs must still be those of one plain forward over the whole
prompt, for ragged batches (left padding in the cached part and in the new part), rows that
stopped early, n > 1, rows with no stored prefix beside rows with one, and models that keep
transformers' forward. New weights must clear the store.
"""
from __future__ import annotations

import pytest
import torch
import transformers

from rlyard.agent.loop import AgentLimits, run_episodes
from rlyard.engines import HFEngine
from rlyard.engines.prefix import CachedPrefix, PrefixStore
from rlyard.orchestrate.rollout import render_prompt
from rlyard.types import SamplingParams
from tests.test_agent_loop import EchoEnv, task
from tests.test_engine import TOL, full_forward_logprobs

MB = 1 << 20


def gelu_llama(vocab_size: int):
    """A llama that the lean step refuses (gelu), so the engine runs transformers' forward."""
    config = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, hidden_act="gelu")
    torch.manual_seed(1)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(params=["lean", "transformers"])
def model(request, tiny_model, tokenizer):
    return tiny_model if request.param == "lean" else gelu_llama(len(tokenizer))


@pytest.fixture
def first_prompts(tokenizer) -> list[list[int]]:
    texts = ["What is 37+45? Think step by step, then give the answer.", "Hi", "List three colours."]
    return [render_prompt(tokenizer, [{"role": "user", "content": t}]) for t in texts]


def next_turn(prompt: list[int], completion, tokenizer, text: str) -> list[int]:
    return prompt + completion.token_ids + tokenizer.encode(text, add_special_tokens=False)


def ragged_stop(engine, prompts, steps: int) -> int:
    """A token that, as a stop token, ends the greedy rows after different numbers of steps."""
    rows = [g[0].token_ids for g in engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=steps, seed=7))]
    for token in dict.fromkeys(t for row in rows for t in row):
        lengths = {row.index(token) + 1 if token in row else steps for row in rows}
        if len(lengths) > 1 and max(lengths) > 1:
            return token
    raise AssertionError(f"no token gives ragged stops in {rows}")


def assert_logprobs_of_full_forward(model, prompts, groups, temperature: float) -> None:
    for prompt, group in zip(prompts, groups):
        for completion in group:
            full = full_forward_logprobs(model, prompt, completion.token_ids, temperature)
            assert torch.tensor(completion.logprobs) == pytest.approx(full, abs=TOL)


def test_a_later_turn_reuses_the_cache_and_samples_what_a_full_forward_gives(model, tokenizer, first_prompts):
    engine = HFEngine(model, tokenizer.pad_token_id, prefix_cache_bytes=64 * MB)
    stop = ragged_stop(engine, first_prompts, 8)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, stop_token_ids=(stop,), seed=7, cache_prefix=True)
    turn1 = engine.generate(first_prompts, params)
    assert len(engine.prefix_store) == 3 and engine.prefix_store.reused_tokens == 0
    assert len({len(g[0].token_ids) for g in turn1}) > 1  # rows left the batch at different steps

    replies = ["\nA short tool answer.", "\nA much longer tool answer that goes on for a while, with detail.", "\nok"]
    turn2_prompts = [next_turn(p, g[0], tokenizer, r) for p, g, r in zip(first_prompts, turn1, replies)]
    turn2 = engine.generate(turn2_prompts, params)
    store = engine.prefix_store
    sequences = [len(p) + len(g[0].token_ids) - 1 for p, g in zip(first_prompts, turn1)]
    assert store.reused_tokens == sum(sequences)  # every row reused its whole first turn
    assert store.prefilled_tokens == sum(len(p) for p in turn2_prompts) - sum(sequences)
    assert_logprobs_of_full_forward(model, turn2_prompts, turn2, 1.0)
    assert len(store) == 3  # each turn-2 sequence replaced the turn-1 entry it extended

    # the same turn without the store samples the same tokens
    fresh = HFEngine(model, tokenizer.pad_token_id).generate(turn2_prompts, params)
    assert [g[0].token_ids for g in fresh] == [g[0].token_ids for g in turn2]


def test_rows_with_and_without_a_stored_prefix_and_n_samples_share_one_batch(model, tokenizer, first_prompts):
    engine = HFEngine(model, tokenizer.pad_token_id, prefix_cache_bytes=64 * MB)
    params = SamplingParams(temperature=0.9, max_new_tokens=5, seed=3, cache_prefix=True)
    turn1 = engine.generate(first_prompts[:2], params)
    stranger = render_prompt(tokenizer, [{"role": "user", "content": "A prompt the store has never seen, and longer than the rest by far."}])
    prompts = [next_turn(first_prompts[0], turn1[0][0], tokenizer, " more"), stranger,
               next_turn(first_prompts[1], turn1[1][0], tokenizer, " and more text here")]
    groups = engine.generate(prompts, params, n=3)
    assert engine.prefix_store.reused_tokens > 0
    assert_logprobs_of_full_forward(model, prompts, groups, 0.9)
    same_seed = HFEngine(model, tokenizer.pad_token_id).generate(prompts, params, n=3)
    assert [[c.token_ids for c in g] for g in same_seed] == [[c.token_ids for c in g] for g in groups]


def test_new_weights_clear_the_store_and_calls_without_cache_prefix_store_nothing(tiny_model, tokenizer, first_prompts):
    engine = HFEngine(tiny_model, tokenizer.pad_token_id, prefix_cache_bytes=64 * MB)
    engine.generate(first_prompts, SamplingParams(temperature=0.0, max_new_tokens=4))
    assert len(engine.prefix_store) == 0  # single-turn callers pay nothing
    engine.generate(first_prompts, SamplingParams(temperature=0.0, max_new_tokens=4, cache_prefix=True))
    assert len(engine.prefix_store) == 3
    engine.update_weights(1, {"model.norm.weight": torch.full_like(tiny_model.model.norm.weight, 0.5)})
    assert len(engine.prefix_store) == 0 and engine.prefix_store.nbytes == 0


def entry(tokens: tuple[int, ...], length_bytes: int) -> CachedPrefix:
    keys = (torch.zeros(length_bytes // 8),)  # 4-byte floats, keys and values
    return CachedPrefix(tokens, keys, (torch.zeros(length_bytes // 8),))


def test_store_finds_the_longest_prefix_and_evicts_the_least_recently_used():
    store = PrefixStore(max_bytes=3000)
    store.put(entry((1, 2), 1000))
    store.put(entry((1, 2, 3, 4), 1000))
    store.put(entry((9,), 1000))
    assert store.longest_prefix([1, 2, 3, 4, 5]).tokens == (1, 2, 3, 4)
    assert store.longest_prefix([1, 2, 3, 4]).tokens == (1, 2)  # the prompt's last token must be fed
    assert store.longest_prefix([7, 1, 2, 3]) is None
    store.put(entry((5, 5), 1000))  # over budget: (9,) was used least recently
    assert store.longest_prefix([9, 9]) is None and len(store) == 3 and store.nbytes == 3000
    store.put(entry((1, 2, 3, 4, 5, 6), 1000), replaces=store.longest_prefix([1, 2, 3, 4, 5]))
    assert store.longest_prefix([1, 2, 3, 4, 5]).tokens == (1, 2)
    store.put(entry((8,), 4000))  # larger than the whole budget: not kept, nothing evicted
    assert len(store) == 3


def test_agent_episodes_are_the_same_with_and_without_the_store(tiny_model, tokenizer):
    limits = AgentLimits(max_turns=4, max_tokens_per_turn=6, max_total_tokens=10_000)
    # a third of the ids stop a reply: replies of a few tokens, and the conversations go on
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_token_ids=tuple(range(0, len(tokenizer), 3)), seed=0)
    runs = []
    for cache_bytes in (0, 64 * MB):
        engine = HFEngine(tiny_model, tokenizer.pad_token_id, prefix_cache_bytes=cache_bytes)
        envs = [EchoEnv(turns=3), EchoEnv(turns=2), EchoEnv(turns=4)]
        tasks = [task("Say something."), task("Two"), task("A longer instruction for the third episode.")]
        runs.append((engine, run_episodes(engine, tokenizer, envs, tasks, ["a", "b", "c"], params, limits)))
    (_, plain), (cached_engine, cached) = runs
    assert cached_engine.prefix_store.reused_tokens > cached_engine.prefix_store.prefilled_tokens
    assert max(t.turns for t in cached) >= 3
    for a, b in zip(plain, cached):
        assert a.turns == b.turns and a.token_ids == b.token_ids and a.loss_mask == b.loss_mask
        assert b.behaviour_logprobs == pytest.approx(a.behaviour_logprobs, abs=TOL)
