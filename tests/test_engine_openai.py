"""`rollout.engine=openai`: training against a real OpenAI-compatible server on loopback.

The server is `rlyard serve` itself (uvicorn, over the real HFEngine on the tiny model of
`model.name`), so every sampled token crosses HTTP as vLLM's fields (token-id prompts,
`logprobs: 0`, `return_token_ids`, `return_tokens_as_token_ids`, `stop_token_ids`) and every
new policy as a LoRA adapter through `/v1/load_lora_adapter`. A wrapper around the server's
engine records what it sampled and with which adapter, to compare with what the trainer got.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from rlyard.config import ConfigError  # noqa: E402
from rlyard.engines import HFEngine  # noqa: E402
from rlyard.models import load_model  # noqa: E402
from rlyard.orchestrate import entry, sync_loop  # noqa: E402
from rlyard.orchestrate.setup import build, stop_tokens  # noqa: E402
from rlyard.serve import RlyardServer, serve  # noqa: E402

from test_train_loop import make_config, read_jsonl  # noqa: E402

STEPS = 3


class RecordingEngine:
    """The server's real HFEngine; records each call's completions and the adapter it ran with."""

    def __init__(self, engine: HFEngine):
        self.engine, self.model, self.calls, self.adapters = engine, engine.model, [], None

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def update_weights(self, version, state_dict=None):
        self.engine.update_weights(version, state_dict)

    def generate(self, prompts, params, n=1, on_step=None):
        out = self.engine.generate(prompts, params, n, on_step=on_step)
        self.calls.append((self.adapters.active, [c for group in out for c in group]))
        return out


@pytest.fixture(scope="module")
def server(tiny_model_dir, tokenizer):
    engine = RecordingEngine(HFEngine(load_model(str(tiny_model_dir), "float32", "cpu"), tokenizer.pad_token_id))
    app = RlyardServer(engine, tokenizer, str(tiny_model_dir), stop_tokens(tokenizer), max_tokens_default=8)
    engine.adapters = app.adapters
    httpd = serve(app, "127.0.0.1", 0).start()
    yield app, engine, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.close()


@pytest.fixture(scope="module")
def trained(server, tiny_model_dir, tmp_path_factory):
    """A short LoRA run whose every rollout is sampled by the server; the batches are kept."""
    app, engine, url = server
    run_dir = tmp_path_factory.mktemp("openai-run")
    config = make_config(tiny_model_dir, run_dir, "rollout.engine=openai", f"rollout.base_url={url}", f"train.steps={STEPS}",
                         "model.lora.rank=4", "model.lora.alpha=8", "algo.lr=5e-2", "rollout.temperature=1.0")
    batches = []
    sample_batch = sync_loop.sample_batch

    def recording(c, config, step):
        out = sample_batch(c, config, step)
        batches.append(out[0])
        return out

    mp = pytest.MonkeyPatch()
    mp.setattr(sync_loop, "sample_batch", recording)
    try:
        result = entry.train(config, run_dir)
    finally:
        mp.undo()
    return config, run_dir, result, batches


def test_a_training_run_samples_every_token_from_the_server(server, trained):
    app, engine, url = server
    config, run_dir, result, batches = trained
    assert result.steps == STEPS and len(batches) == STEPS
    rows = [row for row in read_jsonl(run_dir / "metrics.jsonl") if "reward/mean" in row]
    assert len(rows) == STEPS
    # the server's weights are the learner's, in the same dtype: the logprob gap is float noise
    assert all(row["train/logprob_mismatch"] < 1e-3 for row in rows), [row["train/logprob_mismatch"] for row in rows]

    sampled = {(tuple(c.token_ids), tuple(c.logprobs)): name for name, completions in engine.calls for c in completions}
    adapters = []
    for step, batch in enumerate(batches):
        assert len(batch) == config.rollout.prompts_per_step * config.rollout.n
        for traj in batch:
            tokens = [t for t, m in zip(traj.token_ids, traj.loss_mask) if m]
            logprobs = [lp for lp, m in zip(traj.behaviour_logprobs, traj.loss_mask) if m]
            # exactly what the server sampled and reported (ids and floats), never re-tokenized
            assert (tuple(tokens), tuple(logprobs)) in sampled
            adapters.append((step, sampled[tuple(tokens), tuple(logprobs)]))
            # step k samples with the adapter of version k (the fresh, all-zero adapter first)
            assert {v for v, m in zip(traj.policy_versions, traj.loss_mask) if m} == {step}
    assert all(name.endswith(f"-v{step}") for step, name in adapters), adapters
    assert len({name for _, name in adapters}) == STEPS  # a new adapter each step
    # the last version stays loaded for the next step; the earlier ones were unloaded
    assert [m["id"] for m in app.models()["data"][1:]] == [adapters[-1][1].replace(f"-v{STEPS - 1}", f"-v{STEPS}")]


def test_the_trained_adapter_changes_what_the_server_samples(server, trained, tokenizer):
    app, engine, url = server
    final = app.models()["data"][-1]["id"]
    prompt = tokenizer("Say something.", add_special_tokens=False).input_ids
    api = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)

    def greedy(model):
        reply = api.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0, logprobs=0,
                                       extra_body={"return_token_ids": True})
        return reply.choices[0].token_ids, reply.choices[0].logprobs.token_logprobs

    base_tokens, base_logprobs = greedy(app.model_name)
    tokens, logprobs = greedy(final)
    assert (tokens, logprobs) != (base_tokens, base_logprobs)
    assert tokens != base_tokens or max(abs(a - b) for a, b in zip(logprobs, base_logprobs)) > 1e-3


def test_async_mode_samples_from_the_server_too(server, tiny_model_dir, tmp_path):
    """Rollout threads share the engine; each new adapter waits for the requests in flight."""
    app, engine, url = server
    config = make_config(tiny_model_dir, tmp_path, "rollout.engine=openai", f"rollout.base_url={url}", "train.steps=2",
                         "model.lora.rank=4", "model.lora.alpha=8", "orchestrate.mode=async", "orchestrate.workers=2")
    calls = len(engine.calls)
    assert entry.train(config, tmp_path).steps == 2
    assert len(engine.calls) > calls
    rows = [row for row in read_jsonl(tmp_path / "metrics.jsonl") if "reward/mean" in row]
    assert len(rows) == 2
    # groups sampled by the policy being trained match it to float noise (stale ones trail by a step)
    fresh = [row["train/logprob_mismatch"] for row in rows if row["rollout/staleness_max"] == 0]
    assert fresh and all(gap < 1e-3 for gap in fresh), rows


# --------------------------------------------------------------------------- what rlyard serve adds
def test_serve_returns_sampled_ids_and_honours_stop_token_ids(server, tokenizer):
    app, engine, url = server
    api = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)
    prompt = tokenizer("Hello", add_special_tokens=False).input_ids
    extra = {"return_token_ids": True, "return_tokens_as_token_ids": True}
    reply = api.completions.create(model=app.model_name, prompt=prompt, max_tokens=8, seed=1, logprobs=0, extra_body=extra)
    choice = reply.choices[0]
    assert choice.logprobs.tokens == [f"token_id:{t}" for t in choice.token_ids]
    assert choice.prompt_token_ids == prompt and len(choice.logprobs.token_logprobs) == len(choice.token_ids)
    streamed = api.completions.create(model=app.model_name, prompt=prompt, max_tokens=8, seed=1, logprobs=0, extra_body=extra,
                                      stream=True)
    assert [t for chunk in streamed for t in (chunk.choices[0].model_extra or {}).get("token_ids", [])] == choice.token_ids
    # a stop token id of the client's own ends the reply after it, the id included
    first = choice.token_ids[0]
    stopped = api.completions.create(model=app.model_name, prompt=prompt, max_tokens=8, seed=1, logprobs=0,
                                     extra_body={**extra, "stop_token_ids": [first]})
    assert stopped.choices[0].token_ids == [first] and stopped.choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError, match="stop_token_ids"):
        api.completions.create(model=app.model_name, prompt=prompt, max_tokens=2, extra_body={"stop_token_ids": [10**9]})


def test_serve_refuses_adapters_it_cannot_load(server, tmp_path):
    app, engine, url = server
    with httpx.Client(base_url=url, timeout=30) as client:
        missing = client.post("/load_lora_adapter", json={"lora_name": "a", "lora_path": str(tmp_path)})
        assert missing.status_code == 400 and "adapter_config.json" in missing.json()["error"]["message"]
        unknown = client.post("/unload_lora_adapter", json={"lora_name": "nobody"})
        assert unknown.status_code == 404
        assert client.post("/completions", json={"model": "nobody", "prompt": [1, 2]}).status_code == 404


# --------------------------------------------------------------------------- start-up errors
class FakeServer:
    """An OpenAI-compatible server on loopback that answers completions without what the engine needs."""

    def __init__(self, choice: dict):
        import uvicorn
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def models(request):
            return JSONResponse({"object": "list", "data": [{"id": "fake", "object": "model"}]})

        async def completions(request):
            return JSONResponse({"id": "cmpl-1", "object": "text_completion", "model": "fake", "choices": [choice]})

        app = Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}/v1"
        self.server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    def close(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()


@pytest.mark.parametrize("choice, missing", [
    ({"index": 0, "text": "hi", "finish_reason": "length", "logprobs": None}, "no logprobs.*rlyard serve"),
    ({"index": 0, "text": "hi", "finish_reason": "length", "logprobs": {"tokens": ["h", "i"], "token_logprobs": [-1.0, -2.0]}},
     "no sampled token ids.*rlyard serve"),
    # ids and logprobs, but not the trainer's model's (the tiny random llama gives each token about -10.8)
    ({"index": 0, "text": "hi", "finish_reason": "length", "token_ids": [5, 6],
      "logprobs": {"tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-0.01, -0.01]}}, "does not sample the trainer's policy"),
])
def test_a_server_without_ids_or_logprobs_is_refused_at_start_naming_what_is_missing(tiny_model_dir, tmp_path, choice, missing):
    fake = FakeServer(choice)
    try:
        config = make_config(tiny_model_dir, tmp_path, "rollout.engine=openai", f"rollout.base_url={fake.url}")
        with pytest.raises(ConfigError, match=missing) as caught:
            build(config)
        assert fake.url in str(caught.value)
    finally:
        fake.close()


def test_an_unreachable_base_url_or_full_fine_tuning_is_a_config_error(tiny_model_dir, tmp_path, server):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = make_config(tiny_model_dir, tmp_path, "rollout.engine=openai", f"rollout.base_url=http://127.0.0.1:{port}/v1")
    with pytest.raises(ConfigError, match="rollout.base_url=.*cannot reach the server"):
        build(config)
    with pytest.raises(ConfigError, match="rollout.base_url"):
        build(make_config(tiny_model_dir, tmp_path, "rollout.engine=openai"))
    full = make_config(tiny_model_dir, tmp_path, "rollout.engine=openai", f"rollout.base_url={server[2]}", "model.lora.enabled=false")
    with pytest.raises(ConfigError, match="LoRA adapters only"):
        build(full)
