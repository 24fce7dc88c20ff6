"""`rlyard serve` generation through the official openai client: stop strings, token-by-token
streaming, abandoned requests and batching of concurrent ones.

A real uvicorn server on a local port over the real HFEngine; the wrapper engines below only
count and slow down its decode steps (a tiny model decodes faster than a client can hang up).
"""
import json
import threading
import time
import urllib.request

import pytest

openai = pytest.importorskip("openai")

from rlyard.engines import HFEngine  # noqa: E402
from rlyard.serve import RlyardServer, serve  # noqa: E402
from rlyard.serve.scheduler import HOLD_MARKER, Row  # noqa: E402

STOP = (2,)
USER = [{"role": "user", "content": "Tell me a story."}]


class StepEngine:
    """The real HFEngine, recording each generate call (prompts, decode steps) and sleeping
    `delay` seconds per decode step."""

    def __init__(self, engine: HFEngine, delay: float = 0.0):
        self.engine, self.model, self.delay = engine, engine.model, delay
        self.calls: list[dict] = []

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def generate(self, prompts, params, n=1, on_step=None):
        call = {"prompts": len(prompts), "steps": 0, "done": False, "temperature": params.temperature}
        self.calls.append(call)

        def hook(outputs):
            call["steps"] += 1
            time.sleep(self.delay)
            return on_step(outputs) if on_step else None

        try:
            return self.engine.generate(prompts, params, n, on_step=hook)
        finally:
            call["done"] = True


class NoHookEngine:
    """An engine as the Engine protocol had it: no on_step keyword."""

    def __init__(self, engine: HFEngine):
        self.engine, self.model = engine, engine.model
        self.policy_version = 0

    def generate(self, prompts, params, n=1):
        return self.engine.generate(prompts, params, n)


def start(engine, tokenizer):
    app = RlyardServer(engine, tokenizer, "tiny", STOP, max_tokens_default=8)
    httpd = serve(app, "127.0.0.1", 0).start()
    return app, httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def server(tiny_model, tokenizer):
    engine = StepEngine(HFEngine(tiny_model, tokenizer.pad_token_id))
    app, httpd, base = start(engine, tokenizer)
    yield app, engine, base
    httpd.close()


def client(base: str, path: str = "/v1", timeout: float = 60):
    return openai.OpenAI(base_url=base + path, api_key="unused", max_retries=0, timeout=timeout)


def wait_for(condition, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def spanning_stop(tokenizer, tokens: list[int]) -> tuple[str, int]:
    """A stop string that starts inside one sampled token and ends inside the next, and how many
    tokens the policy has sampled once it is complete."""
    for k in range(len(tokens) - 1):
        this, following = tokenizer.decode(tokens[k : k + 1]), tokenizer.decode(tokens[k + 1 : k + 2])
        if len(this.strip()) >= 2 and len(following.strip()) >= 2 and this.isprintable() and following.isprintable():
            start = len(tokenizer.decode(tokens[:k])) + len(this) - 1  # the last character of token k
            text = tokenizer.decode(tokens)
            stop = text[start : start + 2]  # ... and the first of token k + 1
            return stop, next(m for m in range(1, len(tokens) + 1) if stop in tokenizer.decode(tokens[:m]))
    raise AssertionError("no two printable tokens in a row")


def test_stop_strings_span_tokens_end_the_reply_and_are_cut_from_it(server, tokenizer):
    app, engine, base = server
    api = client(base)
    free = client(base, "/sessions/free/v1").chat.completions.create(model="tiny", messages=USER, max_tokens=12, seed=5)
    tokens = sampled_tokens(base, "free")
    text = free.choices[0].message.content
    assert len(tokens) == 12 and text == tokenizer.decode(tokens)
    stop, sampled = spanning_stop(tokenizer, tokens)
    assert stop in text and sampled < 12
    cut = api.chat.completions.create(model="tiny", messages=USER, max_tokens=12, seed=5, stop=["never-there", stop])
    assert cut.choices[0].message.content == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop" and cut.usage.completion_tokens == sampled
    chunks = list(api.chat.completions.create(model="tiny", messages=USER, max_tokens=12, seed=5, stop=stop, stream=True))
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == text[: text.index(stop)] and not any(stop in p for p in pieces)
    assert chunks[-1].choices[0].finish_reason == "stop"
    # the session records exactly the sampled tokens, up to the one that completed the stop string
    client(base, "/sessions/s1/v1").chat.completions.create(model="tiny", messages=USER, max_tokens=12, seed=5, stop=stop)
    assert sampled_tokens(base, "s1") == tokens[:sampled]


def sampled_tokens(base: str, session: str) -> list[int]:
    [row] = json.loads(urllib.request.urlopen(f"{base}/sessions/{session}/trajectories").read())["trajectories"]
    return [t for t, m in zip(row["token_ids"], row["loss_mask"]) if m]


def test_chat_streams_token_by_token_with_usage_and_logprobs(server):
    app, engine, base = server
    api = client(base)
    plain = api.chat.completions.create(model="tiny", messages=USER, max_tokens=10, seed=7, logprobs=True)
    engine.delay = 0.05
    received, steps_then = [], []
    for chunk in api.chat.completions.create(model="tiny", messages=USER, max_tokens=10, seed=7, logprobs=True, stream=True,
                                             stream_options={"include_usage": True}):
        received.append(chunk)
        steps_then.append(engine.calls[-1]["steps"])
    content = [c for c in received if c.choices and c.choices[0].delta.content]
    assert len(content) >= 3 and steps_then[received.index(content[0])] < 10  # arrived while the engine was decoding
    assert "".join(c.choices[0].delta.content for c in content) == plain.choices[0].message.content
    logprobs = [entry for c in received if c.choices and c.choices[0].logprobs for entry in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in logprobs] == [(e.token, e.logprob) for e in plain.choices[0].logprobs.content]
    assert received[0].choices[0].delta.role == "assistant"
    assert received[-1].choices == [] and received[-1].usage.completion_tokens == plain.usage.completion_tokens == 10
    assert received[-2].choices[0].finish_reason == "length"


def test_completions_stream_as_server_sent_events(server):
    app, engine, base = server
    api = client(base)
    plain = api.completions.create(model="tiny", prompt="Once upon a time", max_tokens=8, seed=2, logprobs=0)
    chunks = list(api.completions.create(model="tiny", prompt="Once upon a time", max_tokens=8, seed=2, logprobs=0, stream=True,
                                         stream_options={"include_usage": True}))
    assert all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == plain.choices[0].text
    assert sum(len(c.choices[0].logprobs.token_logprobs) for c in chunks if c.choices and c.choices[0].logprobs) == 8
    assert chunks[-1].usage.completion_tokens == 8 and chunks[-2].choices[0].finish_reason == "length"
    many = list(api.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4, n=2, seed=2, stream=True))
    assert {c.choices[0].index for c in many} == {0, 1}


def test_an_engine_without_the_step_hook_still_serves_streams_and_stops(tiny_model, tokenizer):
    app, httpd, base = start(NoHookEngine(HFEngine(tiny_model, tokenizer.pad_token_id)), tokenizer)
    try:
        api = client(base)
        plain = api.chat.completions.create(model="tiny", messages=USER, max_tokens=10, seed=7)
        text = plain.choices[0].message.content
        streamed = list(api.chat.completions.create(model="tiny", messages=USER, max_tokens=10, seed=7, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == text
        stop = text.strip()[2:4]
        cut = api.chat.completions.create(model="tiny", messages=USER, max_tokens=10, seed=7, stop=stop)
        assert cut.choices[0].message.content == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    finally:
        httpd.close()


def test_an_abandoned_request_stops_generating(server):
    app, engine, base = server
    engine.delay = 0.05  # 300 tokens: 15 s
    with pytest.raises(openai.APITimeoutError):
        client(base, timeout=0.5).chat.completions.create(model="tiny", messages=USER, max_tokens=300, temperature=1.0)
    started = time.monotonic()
    reply = client(base).chat.completions.create(model="tiny", messages=USER, max_tokens=2, temperature=0)  # greedy: no sampled stop
    assert reply.usage.completion_tokens == 2 and time.monotonic() - started < 5
    assert engine.calls[0]["done"] and engine.calls[0]["steps"] < 60  # dropped from the batch soon after the hang-up
    # a stream the client closes stops too
    with client(base).chat.completions.create(model="tiny", messages=USER, max_tokens=300, temperature=1.0, stream=True) as chunks:
        for count, _ in enumerate(chunks):
            if count == 2:
                break
    wait_for(lambda: engine.calls[2]["done"], seconds=5)
    assert engine.calls[2]["steps"] < 60


def test_concurrent_requests_share_one_engine_call(server):
    app, engine, base = server
    engine.delay = 0.05
    results: dict[str, object] = {}

    def ask(name: str, temperature: float) -> None:
        results[name] = client(base).chat.completions.create(model="tiny", messages=[{"role": "user", "content": name}],
                                                             max_tokens=6, temperature=temperature)

    first = threading.Thread(target=ask, args=("first", 1.0))
    first.start()
    wait_for(lambda: engine.calls)  # the engine is busy with the first request
    others = [threading.Thread(target=ask, args=(f"client {i}", 1.0)) for i in range(3)]
    for thread in others:
        thread.start()
    wait_for(lambda: len(app.scheduler.waiting) == 3)  # the oldest waiting request is at T 1.0
    others.append(threading.Thread(target=ask, args=("colder", 0.5)))
    others[-1].start()
    wait_for(lambda: len(app.scheduler.waiting) == 4)
    for thread in [first, *others]:
        thread.join(timeout=60)
    assert [(c["prompts"], c["temperature"]) for c in engine.calls] == [(1, 1.0), (3, 1.0), (1, 0.5)]
    assert all(results[name].usage.completion_tokens >= 1 for name in ["first", "colder", *(f"client {i}" for i in range(3))])


def test_rows_hold_back_what_may_still_change(tokenizer):
    """What a stream shows: never a piece of a stop string, never tool-call markup as content."""
    reply = 'Sure.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    row = Row(tokenizer, [], STOP, 100, hold=HOLD_MARKER)
    shown = "".join(row.push(t, 0.0) for t in tokenizer(reply, add_special_tokens=False).input_ids)
    assert shown == "Sure.\n" and row.text == reply and row.finish is None
    row = Row(tokenizer, ["END"], STOP, 100)
    pieces = [row.push(t, 0.0) for t in tokenizer("one two EN three END four", add_special_tokens=False).input_ids]
    assert "".join(pieces) == "one two EN three " == row.text and row.finish == "stop"
    assert not any(p.endswith("EN") for p in pieces)  # "EN" was held until " three" showed it is no stop


def test_the_engine_step_hook_sees_every_token_and_removes_rows(tiny_model, tokenizer):
    from rlyard.types import SamplingParams

    engine = HFEngine(tiny_model, tokenizer.pad_token_id)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_token_ids=STOP, seed=3)
    prompts = [[1, 2, 3, 4], [1, 2, 5]]
    plain = engine.generate(prompts, params, n=2)
    seen: dict[int, list[int]] = {}

    def hook(outputs):
        for index, token, logprob in outputs:
            seen.setdefault(index, []).append(token)
        return [index for index, _, _ in outputs if index == 1 and len(seen[1]) == 2]

    hooked = engine.generate(prompts, params, n=2, on_step=hook)
    flat, flat_plain = [c for group in hooked for c in group], [c for group in plain for c in group]
    assert len(flat[1].token_ids) == 2 and flat[1].finish_reason == "stop" and flat[1].token_ids == flat_plain[1].token_ids[:2]
    assert [seen[i] for i in range(4)] == [c.token_ids for c in flat]
    # up to the removal the draws are those of the call without a hook (after it, fewer rows draw fewer numbers)
    assert [c.token_ids[:2] for c in flat] == [c.token_ids[:2] for c in flat_plain]
    assert all(len(c.token_ids) == 6 or c.finish_reason == "stop" for c in flat)
