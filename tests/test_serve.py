"""`rlyard serve` with the official openai client, and session recording that trains."""
import threading

import pytest
import torch

openai = pytest.importorskip("openai")

from rlyard.agent.loop import TemplateRenderer  # noqa: E402
from rlyard.config import AlgoConfig  # noqa: E402
from rlyard.engines import HFEngine  # noqa: E402
from rlyard.serve import RlyardServer, serve  # noqa: E402
from rlyard.train import Learner  # noqa: E402
from rlyard.types import Trajectory  # noqa: E402

STOP = (2,)
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                             "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


@pytest.fixture
def running(tiny_model, tokenizer):
    engine = HFEngine(tiny_model, tokenizer.pad_token_id)
    app = RlyardServer(engine, tokenizer, "tiny", STOP, max_tokens_default=8)
    httpd = serve(app, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield app, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def client(base: str, path: str = "/v1"):
    return openai.OpenAI(base_url=base + path, api_key="unused", max_retries=0, timeout=60)


def test_models_and_completions(running):
    app, base = running
    api = client(base)
    assert [m.id for m in api.models.list().data] == ["tiny"]
    out = api.completions.create(model="tiny", prompt="Hello", max_tokens=5, temperature=0.0, logprobs=0)
    assert out.choices[0].finish_reason in ("stop", "length") and out.usage.completion_tokens >= 1
    assert len(out.choices[0].logprobs.token_logprobs) == out.usage.completion_tokens


def test_chat_with_tools_streaming_off_and_on(running):
    app, base = running
    api = client(base)
    messages = [{"role": "user", "content": "List the files."}]
    plain = api.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=6, seed=1)
    choice = plain.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length", "tool_calls")
    assert plain.usage.prompt_tokens > 20  # the tool specs were rendered into the prompt
    chunks = list(api.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=6, seed=1, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == (choice.message.content or "")  # same seed, same reply
    assert chunks[-1].choices[0].finish_reason == choice.finish_reason


def test_bad_requests_get_openai_style_errors(running):
    app, base = running
    api = client(base)
    with pytest.raises(openai.BadRequestError) as error:
        api.chat.completions.create(model="tiny", messages=[], max_tokens=3)
    assert "messages" in str(error.value)
    with pytest.raises(openai.BadRequestError):
        api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=0)


def test_a_session_records_tokens_and_its_trajectory_trains_one_step(running, tokenizer, tiny_model):
    import json
    import urllib.request

    app, base = running
    api = client(base, "/sessions/ep-1/v1")
    messages = [{"role": "user", "content": "What is in the folder?"}]
    first = api.chat.completions.create(model="tiny", messages=messages, max_tokens=5, seed=2)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "a.txt b.txt"}]
    second = api.chat.completions.create(model="tiny", messages=messages, max_tokens=5, seed=3)
    rows = json.loads(urllib.request.urlopen(f"{base}/sessions/ep-1/trajectories").read())["trajectories"]
    assert len(rows) == 1  # the second call continued the first: one token list
    traj = Trajectory.from_dict(rows[0])
    renderer = TemplateRenderer(tokenizer, STOP)
    segment = app.sessions["ep-1"].segments[0]
    assert traj.turns == 2 and traj.num_sampled_tokens == first.usage.completion_tokens + second.usage.completion_tokens
    # the prompt, sampled reply 1, the rendered user message (mask 0), sampled reply 2
    prompt = renderer.prompt(messages[:1])
    assert traj.token_ids[: len(prompt)] == prompt and not any(traj.loss_mask[: len(prompt)])
    assert second.usage.prompt_tokens == len(traj.token_ids) - second.usage.completion_tokens
    assert len(segment.token_ids) == len(traj.loss_mask) == len(traj.behaviour_logprobs)
    # one learner step on the recorded trajectory (advantage +1) moves the weights
    before = [p.detach().clone() for p in tiny_model.parameters()]
    learner = Learner(tiny_model, AlgoConfig(lr=1e-3), temperature=1.0, micro_batch_size=4)
    metrics = learner.train_step([traj], [1.0])
    assert metrics["loss/grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, tiny_model.parameters()))


def test_the_serve_command_starts_and_answers(tiny_model_dir):
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "rlyard.cli", "serve", f"model.name={tiny_model_dir}", "--port", str(port), "--model-name", "tiny"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 90
        while True:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                assert time.time() < deadline, "rlyard serve did not answer within 90 s"
                time.sleep(0.5)
        assert b'"tiny"' in body
    finally:
        server.terminate()
        server.wait(timeout=30)
