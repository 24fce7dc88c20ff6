"""rollout.engine=vllm against real vLLM (CPU build) and the real embedded SmolLM2-135M.

Runs only where vLLM is importable, i.e. in the separate virtualenv of scripts/setup_vllm.sh:

    .venv-vllm/bin/python -m pytest tests/test_engine_vllm.py

One engine (LoRA on, rank 8) serves every test that needs one: starting vLLM takes about a
minute on 2 cores. Its engine processes are spawned, which pytest's own process allows.
"""
from __future__ import annotations

import threading

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from rlyard.config import ConfigError, RunConfig  # noqa: E402
from rlyard.engines.vllm_engine import VLLMEngine, VLLMEngineError, build_vllm_engine  # noqa: E402
from rlyard.models import add_lora, embedded_model_dir, load_model, load_tokenizer  # noqa: E402
from rlyard.train.logprobs import continuation_logprobs  # noqa: E402
from rlyard.types import SamplingParams  # noqa: E402

RANK = 8
T = 0.7
# fp32 on both sides, different kernels: measured mean gaps are a few 1e-6 nats a token (run
# with -s to see them); another temperature or model would give tenths or more.
GAP_LIMIT = 1e-3


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("embedded")


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return add_lora(load_model("embedded"), RANK, 2 * RANK, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj"])


@pytest.fixture(scope="module")
def engine(policy):
    engine = VLLMEngine(str(embedded_model_dir()), policy, dtype="float32", seed=0, lora_rank=RANK,
                        engine_options={"max_model_len": 512})
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def prompts(tokenizer):
    texts = ["What is 12+34?", "Name a colour.", "What is 12+34?"]
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True,
                                          return_dict=False) for t in texts]


def mean_gap(model, prompt, group) -> float:
    """Mean |engine logprob - the learner's recompute| over a group's sampled tokens."""
    tokens = [c.token_ids for c in group]
    with torch.no_grad():
        exact = continuation_logprobs(model, prompt, tokens, [[1] * len(t) for t in tokens], T, with_entropy=False)
    gaps = torch.cat([(torch.tensor(c.logprobs) - lp).abs() for c, lp in zip(group, exact.logprobs)])
    print(f"[vllm-test] mean |vLLM - learner| logprob gap {float(gaps.mean()):.2e} over {len(gaps)} tokens (max {float(gaps.max()):.2e})")
    return float(gaps.mean())


def test_logprobs_match_the_learner(engine, policy, prompts):
    groups = engine.generate(prompts, SamplingParams(temperature=T, max_new_tokens=16, seed=1), n=4)
    assert [len(g) for g in groups] == [4, 4, 4]
    for prompt, group in zip(prompts, groups):
        assert all(c.policy_version == 0 and len(c.token_ids) == len(c.logprobs) > 0 for c in group)
        assert mean_gap(policy, prompt, group) < GAP_LIMIT


def test_n_seeds_and_length(engine, prompts):
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
    first, again = engine.generate(prompts, params, n=4), engine.generate(prompts, params, n=4)
    assert [[c.token_ids for c in g] for g in first] == [[c.token_ids for c in g] for g in again]  # seeded: reproducible
    assert len({tuple(c.token_ids) for c in first[0]}) > 1  # the n samples of a prompt differ
    assert [c.token_ids for c in first[0]] != [c.token_ids for c in first[2]]  # equal prompts, seed + index: other samples
    assert all(c.finish_reason == "length" and len(c.token_ids) == 12 for g in first for c in g)  # no stop token asked


def test_stop_token_is_kept_like_the_hf_engine(engine, prompts):
    [[greedy, *copies]] = engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_new_tokens=8), n=3)
    assert all(c.token_ids == greedy.token_ids for c in copies)  # greedy n > 1 (vLLM refuses it): n equal replies
    stop = greedy.token_ids[3]
    first = greedy.token_ids.index(stop)
    [[stopped]] = engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_new_tokens=8, stop_token_ids=(stop,)))
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == greedy.token_ids[: first + 1]  # the stop token included, as HFEngine returns it
    assert stopped.logprobs == pytest.approx(greedy.logprobs[: first + 1], abs=1e-4)


def test_concurrent_calls_are_merged(engine, prompts):
    params = SamplingParams(temperature=T, max_new_tokens=6, seed=3)
    expected = [engine.generate([p], params, n=2) for p in prompts[:2]]
    results, before = [None, None], engine.merged_calls
    with engine._lock:  # both calls queue while "another batch" runs
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, engine.generate([prompts[i]], params, n=2)))
                   for i in range(2)]
        for thread in threads:
            thread.start()
        while len(engine._queue) < 2:
            threading.Event().wait(0.01)
    for thread in threads:
        thread.join(timeout=120)
    assert engine.merged_calls == before + 1  # one LLM.generate ran both
    assert [[c.token_ids for c in r[0]] for r in results] == [[c.token_ids for c in e[0]] for e in expected]


def test_lora_update_changes_samples_and_version(engine, policy, prompts):
    params = SamplingParams(temperature=T, max_new_tokens=12, seed=11)
    before = engine.generate(prompts[:1], params, n=4)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05)  # a trained adapter: B != 0
    engine.update_weights(1)
    assert engine.policy_version == 1
    after = engine.generate(prompts[:1], params, n=4)
    assert all(c.policy_version == 1 for c in after[0])
    assert [c.token_ids for c in after[0]] != [c.token_ids for c in before[0]]
    assert mean_gap(policy, prompts[0], after[0]) < GAP_LIMIT  # vLLM samples the updated adapter, exactly
    engine.update_weights(2)  # the same adapter as a new version: the previous one is removed, not leaked
    assert engine.policy_version == 2 and len(engine.llm.llm_engine.list_loras()) == 1


def test_full_weights_on_cpu_are_refused_with_the_fix():
    config = RunConfig.model_validate({"model": {"lora": {"enabled": False}}, "rollout": {"engine": "vllm"}})
    with pytest.raises(ConfigError, match="model.lora.enabled=true"):
        build_vllm_engine(config, load_model("embedded"), None, train=True)
    with pytest.raises(VLLMEngineError, match="no weight-transfer backend"):
        VLLMEngine(str(embedded_model_dir()), load_model("embedded"), lora_rank=None)  # refused before vLLM starts


def test_init_from_base_is_written_as_a_plain_model(policy, tmp_path):
    """model.init_from: vLLM loads the learner's starting weights from a folder; the adapter's
    wrapping (base_layer, lora_*) must not leak into it."""
    from transformers import AutoModelForCausalLM

    from rlyard.engines.vllm_engine import save_base_model

    save_base_model(policy, tmp_path)
    written, original = AutoModelForCausalLM.from_pretrained(tmp_path).state_dict(), load_model("embedded").state_dict()
    assert set(written) == set(original)
    assert all(torch.equal(written[key], original[key]) for key in original)
