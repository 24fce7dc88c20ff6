"""`rlyard serve` refuses what it cannot do, the way OpenAI does, through the official openai client.

Every request here goes over HTTP to a real uvicorn server on a local port, over the real
HFEngine; a wrapper around that engine counts its calls, to show that a refused request never
reached it.
"""
import pytest

openai = pytest.importorskip("openai")

from rlyard.engines import HFEngine  # noqa: E402
from rlyard.serve import RlyardServer, serve  # noqa: E402

STOP = (2,)
USER = [{"role": "user", "content": "Hello there"}]
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                             "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]


class CountingEngine:
    """The real HFEngine, counting its generate calls."""

    def __init__(self, engine: HFEngine):
        self.engine, self.model, self.calls = engine, engine.model, 0

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def generate(self, prompts, params, n=1, on_step=None):
        self.calls += 1
        return self.engine.generate(prompts, params, n, on_step=on_step)


@pytest.fixture
def running(tiny_model, tokenizer):
    engine = CountingEngine(HFEngine(tiny_model, tokenizer.pad_token_id))
    app = RlyardServer(engine, tokenizer, "tiny", STOP, max_tokens_default=4)
    httpd = serve(app, "127.0.0.1", 0).start()
    api = openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="unused", max_retries=0, timeout=60)
    yield app, engine, api
    httpd.close()


def refused(call, status=400) -> dict:
    """The OpenAI error object of a refused request (and check its shape)."""
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    assert caught.value.status_code == status, caught.value
    error = caught.value.body
    assert set(error) == {"message", "type", "param", "code"}, error
    return error


def test_content_given_as_text_parts_is_joined_and_other_parts_are_refused(running):
    app, engine, api = running
    as_string = api.chat.completions.create(model="tiny", messages=USER, max_tokens=4, seed=3)
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]}]
    as_parts = api.chat.completions.create(model="tiny", messages=parts, max_tokens=4, seed=3)
    assert as_parts.usage.prompt_tokens == as_string.usage.prompt_tokens
    assert as_parts.choices[0].message.content == as_string.choices[0].message.content  # same prompt, same seed
    image = [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                          {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    error = refused(lambda: api.chat.completions.create(model="tiny", messages=image, max_tokens=4))
    assert error["param"] == "messages[0].content[1].type" and "image_url" in error["message"]


@pytest.mark.parametrize("field, value, param", [
    ("n", "two", "n"),
    ("n", -1, "n"),
    ("stop", 5, "stop"),
    ("seed", "abc", "seed"),
    ("max_tokens", 1e12, "max_tokens"),
    ("temperature", 3, "temperature"),
    ("tools", [{"type": "function", "function": {"description": "no name"}}], "tools[0].function.name"),
    ("tools", [{"type": "function"}], "tools[0].function"),
    ("tools", "bash", "tools"),
])
def test_malformed_fields_get_a_400_naming_the_field(running, field, value, param):
    app, engine, api = running
    error = refused(lambda: api.chat.completions.create(model="tiny", messages=USER, extra_body={field: value}))
    assert error["param"] == param and param in error["message"] and error["type"] == "invalid_request_error"
    assert engine.calls == 0


def test_malformed_bodies_get_a_400_and_the_server_stays_up(running):
    app, engine, api = running
    for body in ([USER], {"model": "tiny"}, {"model": "tiny", "messages": "hi"}, {"model": "tiny", "messages": []}):
        error = refused(lambda: api.post("/chat/completions", body=body, cast_to=object))
        assert error["message"]
    assert refused(lambda: api.post("/chat/completions", body={"model": "tiny"}, cast_to=object))["param"] == "messages"
    for prompt in ([], "", [-1], [[1], [2]], {"text": "x"}):
        assert refused(lambda: api.completions.create(model="tiny", prompt=prompt, max_tokens=2))["param"] == "prompt"
    assert refused(lambda: api.completions.create(model="tiny", prompt=[10**9], max_tokens=2))["param"] == "prompt"
    assert engine.calls == 0
    assert api.chat.completions.create(model="tiny", messages=USER, max_tokens=2).choices[0].message.role == "assistant"


def test_unknown_model_role_and_field_are_refused(running):
    app, engine, api = running
    error = refused(lambda: api.chat.completions.create(model="gpt-4o", messages=USER), status=404)
    assert error["code"] == "model_not_found" and error["param"] == "model"
    refused(lambda: api.completions.create(model="gpt-4o", prompt="x"), status=404)
    error = refused(lambda: api.chat.completions.create(model="tiny", messages=[{"role": "robot", "content": "hi"}]))
    assert error["param"] == "messages[0].role"
    error = refused(lambda: api.chat.completions.create(model="tiny", messages=USER, extra_body={"mirostat": 1}))
    assert error["param"] == "mirostat" and "not supported" in error["message"]
    for name, value in (("presence_penalty", 0.5), ("frequency_penalty", 1.0), ("logit_bias", {"42": 5})):
        assert refused(lambda: api.chat.completions.create(model="tiny", messages=USER, **{name: value}))["param"] == name
    assert engine.calls == 0


def test_what_does_not_fit_the_context_window_is_refused_before_generating(running, tiny_model):
    app, engine, api = running
    window = tiny_model.config.max_position_embeddings
    assert app.context_window == window
    long = [{"role": "user", "content": "word " * window}]
    error = refused(lambda: api.chat.completions.create(model="tiny", messages=long, max_tokens=2))
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    error = refused(lambda: api.completions.create(model="tiny", prompt=[5] * window, max_tokens=1))
    assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"
    error = refused(lambda: api.chat.completions.create(model="tiny", messages=USER, max_tokens=window))
    assert error["param"] == "max_tokens" and str(window) in error["message"]
    error = refused(lambda: api.chat.completions.create(model="tiny", messages=USER, max_completion_tokens=window))
    assert error["param"] == "max_completion_tokens"
    assert engine.calls == 0
    # a prompt that leaves room for less than the default reply gets what fits
    prompt = [5] * (window - 2)
    assert api.completions.create(model="tiny", prompt=prompt, temperature=1.0, seed=0).usage.completion_tokens <= 2


def test_parameters_that_would_be_ignored_are_refused_or_honoured(running):
    app, engine, api = running
    chat = lambda **kw: api.chat.completions.create(model="tiny", messages=USER, max_tokens=3, seed=1, **kw)  # noqa: E731
    error = refused(lambda: chat(logprobs=True, top_logprobs=2))
    assert error["param"] == "top_logprobs" and "not supported" in error["message"]
    assert len(chat(logprobs=True, top_logprobs=0).choices[0].logprobs.content) == 3  # 0 alternatives: honoured
    assert refused(lambda: chat(response_format={"type": "json_object"}))["param"] == "response_format"
    assert chat(response_format={"type": "text"}).choices[0].message.content == chat().choices[0].message.content
    assert refused(lambda: chat(tools=TOOLS, tool_choice="required"))["param"] == "tool_choice"
    forced = {"type": "function", "function": {"name": "bash"}}
    assert "cannot force" in refused(lambda: chat(tools=TOOLS, tool_choice=forced))["message"]
    with_tools, auto, none = chat(tools=TOOLS), chat(tools=TOOLS, tool_choice="auto"), chat(tools=TOOLS, tool_choice="none")
    assert auto.usage.prompt_tokens == with_tools.usage.prompt_tokens > chat().usage.prompt_tokens
    assert none.usage.prompt_tokens == chat().usage.prompt_tokens  # "none": no tools rendered
    text = lambda **kw: api.completions.create(model="tiny", prompt="Once upon", max_tokens=3, seed=1, **kw)  # noqa: E731
    assert refused(lambda: text(logprobs=2))["param"] == "logprobs"
    assert len(text(logprobs=0).choices[0].logprobs.token_logprobs) == 3
    assert text(echo=True).choices[0].text == "Once upon" + text().choices[0].text
    assert refused(lambda: text(echo=True, logprobs=0))["param"] == "echo"
    assert refused(lambda: text(suffix="The end."))["param"] == "suffix"
    assert refused(lambda: text(best_of=3))["param"] == "best_of"


def test_unknown_routes_answer_in_the_openai_error_shape(running):
    app, engine, api = running
    error = refused(lambda: api.get("/embeddings", cast_to=object), status=404)
    assert "/v1/embeddings" in error["message"]
