"""int8 rollouts in async mode: the first quantisation never runs under a forward pass in flight.

The engine's first batches decode in fp32 and measure the smoothing scales; then every int8
projection is packed. Rollout threads share one engine (SharedEngine), so packing is a write:
it must wait for the forward passes in flight and hold back new ones, as a weight update does.
It used to run at the end of generate, under the shared (read) lock, while other threads were
mid-forward: their batch switched from fp32 to int8 between two layers.

The instrumentation below records, for every quantize() call, how many generate calls were in
flight, and for every lean forward pass whether its projections all ran in one mode.
"""
from __future__ import annotations

import copy
import math
import threading
import time
from pathlib import Path

import pytest

from rlyard.config import load_config
from rlyard.engines import HFEngine
from rlyard.engines.quant import Int8Projection
from rlyard.orchestrate.rollout import render_prompt
from rlyard.orchestrate.entry import train
from rlyard.orchestrate.workers import SharedEngine
from rlyard.types import SamplingParams

pytestmark = pytest.mark.timeout(120)


class Probe:
    """Counts generate calls in flight, and records what every quantize() and lean forward saw."""

    def __init__(self, engine: HFEngine, monkeypatch):
        self.lock, self.in_flight = threading.Lock(), 0
        self.quantized_with_in_flight: list[int] = []  # one entry per Int8Projection.quantize call
        self.mixed_forwards: list[str] = []  # lean forwards whose projections ran in fp32 and int8
        self.errors: list[BaseException] = []
        self.local = threading.local()
        self.hooks = []  # called with (thread name, projection) before each projection call
        generate, forward = engine._generate, engine.decoder.forward
        quantize, call = Int8Projection.quantize, Int8Projection.__call__

        def counted_generate(*args, **kwargs):
            with self.lock:
                self.in_flight += 1
            try:
                return generate(*args, **kwargs)
            finally:
                with self.lock:
                    self.in_flight -= 1

        def recorded_forward(*args, **kwargs):
            self.local.modes = []
            try:
                return forward(*args, **kwargs)
            finally:
                if len(set(self.local.modes)) > 1:
                    self.mixed_forwards.append(f"{threading.current_thread().name}: {self.local.modes}")

        def recorded_quantize(projection):
            with self.lock:
                self.quantized_with_in_flight.append(self.in_flight)
            return quantize(projection)

        def recorded_call(projection, x):
            modes = getattr(self.local, "modes", None)
            if modes is not None:
                modes.append("fp32" if projection.packed is None else "int8")
            for hook in self.hooks:
                hook(threading.current_thread().name, projection)
            return call(projection, x)

        engine._generate, engine.decoder.forward = counted_generate, recorded_forward
        monkeypatch.setattr(Int8Projection, "quantize", recorded_quantize)
        monkeypatch.setattr(Int8Projection, "__call__", recorded_call)

    def run(self, name: str, fn) -> threading.Thread:
        def target():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)

        thread = threading.Thread(target=target, name=name)
        thread.start()
        return thread


def check_completions(groups, prompts, n, params, vocab):
    assert len(groups) == len(prompts)
    for group in groups:
        assert len(group) == n
        for c in group:
            assert 1 <= len(c.token_ids) <= params.max_new_tokens and len(c.logprobs) == len(c.token_ids)
            assert all(0 <= t < vocab for t in c.token_ids)
            assert all(math.isfinite(lp) and lp <= 1e-6 for lp in c.logprobs), c.logprobs
            assert c.finish_reason in ("stop", "length")


@pytest.fixture
def int8_engine(tiny_model, tokenizer):
    engine = HFEngine(copy.deepcopy(tiny_model), tokenizer.pad_token_id, quantize="int8")
    assert all(p.packed is None for p in engine.decoder.int8_projections)  # not calibrated yet
    return engine


def test_quantisation_waits_for_a_forward_in_flight(int8_engine, tokenizer, monkeypatch):
    """Deterministic: thread B is stopped inside its first int8 projection (mid-forward, calibrating)
    until thread A's calibrating generate has returned or waits to quantise. A must not pack the
    layers while B is in there, and B's forward must not switch from fp32 to int8 halfway."""
    shared = SharedEngine(int8_engine)
    probe = Probe(int8_engine, monkeypatch)
    b_in_forward, a_returned = threading.Event(), threading.Event()
    verdict: list[str] = []

    def hold(thread, projection):
        if thread == "B" and not b_in_forward.is_set():
            b_in_forward.set()
            deadline = time.monotonic() + 20
            while not (a_returned.is_set() or shared.writers_waiting):  # A either quantised already, or waits for us
                if time.monotonic() > deadline:
                    verdict.append("A neither returned nor waited to quantise")
                    return
                time.sleep(0.005)
            verdict.append("A returned first" if a_returned.is_set() else "A waited for B")
        elif thread == "A" and not b_in_forward.is_set():
            assert b_in_forward.wait(20), "B never started its forward"

    probe.hooks.append(hold)
    prompt = render_prompt(tokenizer, [{"role": "user", "content": "What is 12+30?"}])
    params = SamplingParams(temperature=0.9, max_new_tokens=6, seed=1)
    outputs = {}

    def generate(name):
        outputs[name] = shared.generate([prompt], params, n=2)
        if name == "A":
            a_returned.set()

    threads = [probe.run("B", lambda: generate("B")), probe.run("A", lambda: generate("A"))]
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads) and not probe.errors, probe.errors
    assert verdict == ["A waited for B"], verdict
    assert probe.quantized_with_in_flight and set(probe.quantized_with_in_flight) == {0}, probe.quantized_with_in_flight
    assert not probe.mixed_forwards, probe.mixed_forwards
    assert all(p.packed is not None for p in int8_engine.decoder.int8_projections)
    for name in "AB":
        check_completions(outputs[name], [prompt], 2, params, len(tokenizer))


def test_threads_generating_with_int8_from_the_first_call(int8_engine, tokenizer, monkeypatch):
    """Several threads call generate at once from the start: no exception, valid completions,
    the layers packed exactly once with nothing in flight, no forward pass of mixed modes."""
    shared = SharedEngine(int8_engine)
    probe = Probe(int8_engine, monkeypatch)
    texts = ["What is 12+30?", "Hello", "Count to five.", "Name a colour."]
    prompts = [render_prompt(tokenizer, [{"role": "user", "content": t}]) for t in texts]
    start = threading.Barrier(4)
    results: dict[int, list] = {}

    def work(i):
        start.wait(10)
        for call in range(4):
            batch = [prompts[i], prompts[(i + call) % 4]]  # two prompts: a shared prefix, tails through the lean step
            params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=10 * i + call)
            results[(i, call)] = (batch, params, shared.generate(batch, params, n=2))

    threads = [probe.run(f"rollout-{i}", lambda i=i: work(i)) for i in range(4)]
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads) and not probe.errors, probe.errors
    assert len(results) == 16
    for batch, params, groups in results.values():
        check_completions(groups, batch, 2, params, len(tokenizer))
    projections = int8_engine.decoder.int8_projections
    assert all(p.packed is not None for p in projections)
    assert len(probe.quantized_with_in_flight) == len(projections)  # each projection packed once
    assert set(probe.quantized_with_in_flight) == {0}, probe.quantized_with_in_flight
    assert not probe.mixed_forwards, probe.mixed_forwards[:3]


def test_a_pinned_block_quantises_when_it_lets_go(int8_engine, tokenizer):
    """partial_rollouts=false: a worker holds the weights for its whole group; packing waits for the
    end of the block (the thread cannot take the exclusive lock while it holds the shared one)."""
    shared = SharedEngine(int8_engine)
    prompt = render_prompt(tokenizer, [{"role": "user", "content": "Hello"}])
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=2)
    with shared.pinned():
        shared.generate([prompt], params, n=2)
        shared.generate([prompt], params, n=2)
        assert int8_engine.quantization_pending  # measured, not packed while pinned
    assert not int8_engine.quantization_pending
    assert all(p.packed is not None for p in int8_engine.decoder.int8_projections)


def test_single_threaded_engine_still_quantises_after_its_first_batch(int8_engine, tokenizer):
    prompt = render_prompt(tokenizer, [{"role": "user", "content": "Hello"}])
    int8_engine.generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=4, seed=2), n=2)
    assert all(p.packed is not None for p in int8_engine.decoder.int8_projections)


def test_the_shared_engine_asks_for_lora_factors_as_its_engine_does(int8_engine, tiny_model, tokenizer):
    """Async pushes go through SharedEngine: without passing the question on, every LoRA push to
    the int8 engine would re-pack all its projections."""
    assert SharedEngine(int8_engine).takes_lora_factors is True
    assert SharedEngine(HFEngine(tiny_model, tokenizer.pad_token_id)).takes_lora_factors is False


def test_async_training_with_int8_rollouts(tmp_path: Path, tiny_model_dir):
    config = load_config(None, [
        f"model.name={tiny_model_dir}", "env.name=toy", "env.train_size=8", "rollout.prompts_per_step=2", "rollout.n=4",
        "rollout.max_new_tokens=6", "eval.size=0", "output.progress=false", "output.plot=false", f"output.run_dir={tmp_path}",
        "model.lora.enabled=false", "algo.lr=1e-2", "orchestrate.mode=async", "orchestrate.workers=3", "train.steps=3",
        "rollout.quantize=int8",
    ])
    assert train(config, tmp_path).steps == 3
