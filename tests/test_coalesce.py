"""CoalescingEngine on the tiny random llama: merged calls give each caller what it would get
alone, in fewer and larger underlying batches, never across a weight update."""
from __future__ import annotations

import copy
import threading
import time

import pytest
import torch

from rlyard.config import load_config
from rlyard.engines import CoalescingEngine, HFEngine
from rlyard.orchestrate import setup
from rlyard.orchestrate.entry import train
from rlyard.types import SamplingParams

pytestmark = pytest.mark.timeout(120)
TOL = 1e-4


class Counting:
    """The engine, recording the rows of each generate call and of each decode step."""

    def __init__(self, engine):
        self.engine, self.calls, self.steps, self.lock = engine, [], [], threading.Lock()

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def generate(self, prompts, params, n=1, on_step=None):
        def hook(outputs):
            with self.lock:
                self.steps.append(len(outputs))
            return on_step(outputs) if on_step is not None else None

        with self.lock:
            self.calls.append(len(prompts) * n)
        return self.engine.generate(prompts, params, n, on_step=hook)

    def update_weights(self, version, state_dict=None):
        self.engine.update_weights(version, state_dict)


def in_threads(fn, count: int, warm_up: bool = False, between=None) -> list:
    """fn(i) on `count` threads at once; their results (a thread's exception is raised here).
    `warm_up`: each thread calls fn(i) once before, so that the coalescer knows every thread
    (its peers) when the measured calls arrive; `between` runs after the warm-up."""
    results, errors = [None] * count, []
    start, again = threading.Barrier(count), threading.Barrier(count, action=between)

    def run(i):
        try:
            start.wait()
            if warm_up:
                fn(i)
                again.wait()
            results[i] = fn(i)
        except Exception as error:  # noqa: BLE001 - re-raised below
            errors.append(error)
            start.abort(), again.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
    return results


@pytest.fixture
def sharp_model(tiny_model):
    """The tiny llama with larger weights: its greedy replies differ from prompt to prompt (the
    default init repeats one token everywhere, which would hide rows getting each other's tokens)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for param in tiny_model.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.2)
    return tiny_model


@pytest.fixture
def prompts(tokenizer) -> list[list[int]]:
    texts = ["Hi", "What is 2+2?", "Name a colour.", "Tell me a very short story about a cat", "Yes", "Count to three"]
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True,
                                          return_dict=False) for t in texts]


def calls_for(prompts, stop):
    """Six calls: different prompts, n of 1 or 2, two prompts in one call, per-call token limits."""
    limits = [6, 3, 8, 5, 6, 2]
    shapes = [([prompts[0]], 1), ([prompts[1]], 2), ([prompts[2], prompts[3]], 1), ([prompts[3]], 1), ([prompts[4]], 2), ([prompts[5]], 1)]
    return [(ps, SamplingParams(temperature=0.0, max_new_tokens=m, stop_token_ids=stop, seed=i), n)
            for i, ((ps, n), m) in enumerate(zip(shapes, limits))]


def assert_same(got, want):
    assert len(got) == len(want)
    for g_group, w_group in zip(got, want):
        assert len(g_group) == len(w_group)
        for g, w in zip(g_group, w_group):
            assert g.token_ids == w.token_ids
            assert g.finish_reason == w.finish_reason
            assert g.policy_version == w.policy_version
            torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=TOL, rtol=0)


def test_concurrent_greedy_calls_get_their_solo_completions_in_one_batch(sharp_model, tokenizer, prompts):
    engine = HFEngine(sharp_model, tokenizer.pad_token_id)
    # a stop id that one solo reply samples, so "stop" and "length" rows share the merged batch
    probe = engine.generate([prompts[2]], SamplingParams(temperature=0.0, max_new_tokens=8))[0][0].token_ids
    calls = calls_for(prompts, (probe[3],))
    solo = [engine.generate(ps, params, n) for ps, params, n in calls]
    assert any(c.finish_reason == "stop" for result in solo for group in result for c in group)
    counting = Counting(engine)
    coalescing = CoalescingEngine(counting, window_s=1.0, peer_horizon_s=60.0)
    merged = in_threads(lambda i: coalescing.generate(*calls[i]), len(calls), warm_up=True,
                        between=lambda: (counting.calls.clear(), counting.steps.clear()))
    for got, want in zip(merged, solo):
        assert_same(got, want)
    rows = sum(len(ps) * n for ps, _, n in calls)
    assert counting.calls == [rows]  # all six calls in one underlying generate, every row in it
    assert max(counting.steps) == rows and len(counting.steps) == 8  # the longest limit


def test_a_call_alone_is_the_wrapped_engine_even_when_sampled(sharp_model, tokenizer, prompts):
    engine = HFEngine(sharp_model, tokenizer.pad_token_id)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=7)
    want = engine.generate(prompts[:3], params, n=2)
    assert_same(CoalescingEngine(engine).generate(prompts[:3], params, n=2), want)


def test_each_caller_hook_sees_its_own_rows(sharp_model, tokenizer, prompts):
    engine = HFEngine(sharp_model, tokenizer.pad_token_id)
    coalescing = CoalescingEngine(engine, window_s=1.0, peer_horizon_s=60.0)
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    seen: list[list[int]] = [[], []]

    def play(i):
        def hook(outputs):  # caller 0 ends its second row after two tokens
            seen[i].append(sorted(index for index, _, _ in outputs))
            return [1] if i == 0 and len(seen[i]) == 2 else []

        return coalescing.generate([prompts[i], prompts[i + 2]], params, n=1, on_step=hook)

    batches = []
    first, second = in_threads(play, 2, warm_up=True, between=lambda: (seen[0].clear(), seen[1].clear(), batches.append(coalescing.batches)))
    assert coalescing.batches == batches[0] + 1  # both calls in one merged call
    assert seen[0][0] == [0, 1] and seen[0][2] == [0] and seen[1] == [[0, 1]] * 6
    assert len(first[1][0].token_ids) == 2 and first[1][0].finish_reason == "stop"
    assert_same(second, engine.generate([prompts[1], prompts[3]], params))


def test_weight_updates_never_land_inside_a_merged_batch(sharp_model, tokenizer, prompts):
    """An update that arrives while a merged batch is inside the engine waits for it: that batch is
    all the old version, every later one the new (checked against a plain engine at each version)."""
    engine = HFEngine(copy.deepcopy(sharp_model), tokenizer.pad_token_id)
    base = {k: v.clone() for k, v in sharp_model.state_dict().items()}
    torch.manual_seed(1)
    other = {k: v + 0.05 * torch.randn_like(v) for k, v in base.items()}
    weights = [base, other]  # version v samples from weights[v]
    inside, real_generate = threading.Event(), engine.generate

    def slow_generate(*args, **kwargs):
        inside.set()
        time.sleep(0.2)  # the update below arrives now, in the middle of this batch
        return real_generate(*args, **kwargs)

    engine.generate = slow_generate
    coalescing = CoalescingEngine(engine, window_s=0.01)
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    updater = threading.Thread(target=lambda: (inside.wait(30), coalescing.update_weights(1, other)))
    updater.start()
    got = in_threads(lambda i: [(i, coalescing.generate([prompts[i]], params)[0][0]) for _ in range(2)], 4)
    updater.join()
    got += in_threads(lambda i: [(i, coalescing.generate([prompts[i]], params)[0][0])], 4)  # after the update: version 1
    reference = HFEngine(copy.deepcopy(sharp_model), tokenizer.pad_token_id)
    versions = set()
    for i, completion in (pair for pairs in got for pair in pairs):
        versions.add(completion.policy_version)
        reference.update_weights(completion.policy_version, weights[completion.policy_version])
        assert_same([[completion]], reference.generate([prompts[i]], params))
    assert versions == {0, 1}


class Broken:
    policy_version = 0

    def generate(self, prompts, params, n=1):
        raise RuntimeError("engine down")


def test_bad_input_fails_its_caller_and_engine_errors_reach_the_batch(sharp_model, tokenizer, prompts):
    coalescing = CoalescingEngine(HFEngine(sharp_model, tokenizer.pad_token_id))
    params = SamplingParams(temperature=0.0, max_new_tokens=2)
    with pytest.raises(ValueError, match="at least one token"):
        coalescing.generate([prompts[0], []], params)
    with pytest.raises(ValueError, match="n must be"):
        coalescing.generate([prompts[0]], params, n=0)
    assert coalescing.generate([], params) == [] and coalescing.batches == 0
    assert len(coalescing.generate([prompts[0]], params)[0][0].token_ids) == 2
    broken = CoalescingEngine(Broken())
    assert not hasattr(broken, "hooked") or not broken.hooked
    with pytest.raises(TypeError, match="on_step"):
        CoalescingEngine.generate(broken, [prompts[0]], params, on_step=lambda outputs: None)
    errors = []
    for _ in range(2):  # the queue is not left wedged by a failed batch
        with pytest.raises(RuntimeError, match="engine down") as info:
            broken.generate([prompts[0]], params)
        errors.append(info.value)
    assert len(errors) == 2


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_training_with_coalesce_trains_and_async_merges_calls(tmp_path, tiny_model_dir, monkeypatch, mode):
    made: list[CoalescingEngine] = []

    class Recorded(CoalescingEngine):
        def __init__(self, engine):
            super().__init__(engine)
            made.append(self)

    monkeypatch.setattr(setup, "CoalescingEngine", Recorded)
    config = load_config(None, [
        f"model.name={tiny_model_dir}", "env.name=toy", "env.train_size=8", "rollout.prompts_per_step=2", "rollout.n=4",
        "rollout.max_new_tokens=6", "eval.size=0", "output.progress=false", "output.plot=false", f"output.run_dir={tmp_path}",
        "model.lora.enabled=false", "algo.lr=1e-2", f"orchestrate.mode={mode}", "orchestrate.workers=3", "train.steps=3",
        "rollout.coalesce=true",
    ])
    result = train(config, tmp_path)
    assert result.steps == 3
    [engine] = made
    assert engine.policy_version == 3  # every update went through the wrapper
    if mode == "async":
        assert engine.merged > engine.batches  # some calls of different workers shared a batch
    else:
        assert engine.merged == engine.batches  # one thread: every call alone, as the bare engine
    assert not [t for t in threading.enumerate() if t.name.startswith("rlyard-rollout")]


def test_rlyard_serve_over_the_wrapped_engine_answers_as_over_the_engine(sharp_model, tokenizer):
    """The server's scheduler reads the engine's model and streams through its on_step hook."""
    openai = pytest.importorskip("openai")
    from rlyard.serve import RlyardServer, serve

    replies = []
    for engine in (HFEngine(sharp_model, tokenizer.pad_token_id), CoalescingEngine(HFEngine(sharp_model, tokenizer.pad_token_id))):
        httpd = serve(RlyardServer(engine, tokenizer, "tiny", (2,), max_tokens_default=8), "127.0.0.1", 0)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            api = openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="unused", max_retries=0, timeout=60)
            plain = api.completions.create(model="tiny", prompt="Hello", max_tokens=6, temperature=0.0, logprobs=0)
            chunks = list(api.completions.create(model="tiny", prompt="Hello", max_tokens=6, temperature=0.0, stream=True))
            replies.append((plain.choices[0].text, plain.choices[0].logprobs.token_logprobs, "".join(c.choices[0].text for c in chunks)))
        finally:
            httpd.shutdown()
            httpd.server_close()
    (text, logprobs, streamed), (text2, logprobs2, streamed2) = replies
    assert text == text2 == streamed == streamed2 and text
    torch.testing.assert_close(torch.tensor(logprobs), torch.tensor(logprobs2), atol=TOL, rtol=0)
