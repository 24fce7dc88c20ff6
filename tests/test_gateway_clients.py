"""`rlyard serve` against the official openai client (issue 37): what a client checks before it
starts, a health route to wait on, the `developer` role, a bad content part named exactly, and
the seed and greedy turns of a session. A real uvicorn server on port 0 over the real HFEngine."""
import json
import urllib.error
import urllib.request

import pytest

openai = pytest.importorskip("openai")

from rlyard.engines import HFEngine  # noqa: E402
from rlyard.serve import RlyardServer, serve  # noqa: E402
from rlyard.types import Trajectory  # noqa: E402

STOP = (2,)


class SeedNotingEngine(HFEngine):
    """The real engine; it notes the seed of every call the server makes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seeds = []

    def generate(self, prompts, params, n=1, on_step=None):
        self.seeds.append(params.seed)
        return super().generate(prompts, params, n, on_step=on_step)


@pytest.fixture(scope="module")
def running(tokenizer):
    from conftest import make_tiny_llama

    engine = SeedNotingEngine(make_tiny_llama(len(tokenizer)), tokenizer.pad_token_id)
    app = RlyardServer(engine, tokenizer, "org/tiny-policy", STOP, max_tokens_default=8)
    httpd = serve(app, "127.0.0.1", 0).start()
    yield app, engine, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.close()


def client(base: str, session: str | None = None):
    url = f"{base}/sessions/{session}/v1" if session else f"{base}/v1"
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize("session", [None, "check"])
def test_a_client_can_retrieve_the_served_model_and_is_told_of_an_unknown_one(running, session):
    _, _, base = running
    api = client(base, session)
    model = api.models.retrieve("org/tiny-policy")  # an id with a '/', as HF names are
    assert (model.id, model.object) == ("org/tiny-policy", "model")
    with pytest.raises(openai.NotFoundError) as caught:
        api.models.retrieve("gpt-4o")
    assert caught.value.body["code"] == "model_not_found" and "gpt-4o" in caught.value.body["message"]


@pytest.mark.parametrize("path", ["/health", "/v1/health"])
def test_a_health_route_answers_for_load_balancers(running, path):
    _, _, base = running
    status, body = get(base + path)
    assert status == 200 and body["status"] == "ok" and body["model"] == "org/tiny-policy"


def test_the_developer_role_is_rendered_as_the_system_message(running):
    _, _, base = running
    api = client(base)
    ask = [{"role": "user", "content": "Hi"}]
    as_system = api.chat.completions.create(model="org/tiny-policy", messages=[{"role": "system", "content": "Be brief."}, *ask],
                                            max_tokens=4, seed=3)
    as_developer = api.chat.completions.create(model="org/tiny-policy", messages=[{"role": "developer", "content": "Be brief."}, *ask],
                                               max_tokens=4, seed=3)
    assert as_developer.usage.prompt_tokens == as_system.usage.prompt_tokens
    assert as_developer.choices[0].message.content == as_system.choices[0].message.content


@pytest.mark.parametrize("part, field", [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}, "messages[1].content[1].type"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "messages[1].content[1].type"),
    ({"type": "text", "text": 5}, "messages[1].content[1].text"),
])
def test_an_unsupported_content_part_is_a_4xx_naming_that_part(running, part, field):
    _, _, base = running
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "What is this?"}, part]}]
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(model="org/tiny-policy", messages=messages, max_tokens=4)
    error = caught.value.body
    assert error["param"] == field and field in error["message"], error


def trajectories(base: str, session: str) -> list[Trajectory]:
    rows = json.loads(urllib.request.urlopen(f"{base}/sessions/{session}/trajectories").read())["trajectories"]
    return [Trajectory.from_dict(row) for row in rows]


def test_a_session_sent_one_seed_samples_each_turn_with_its_own(running):
    """A harness sends its episode's seed on every call: each turn must still draw anew."""
    _, engine, base = running
    api, messages, before = client(base, "seeded"), [{"role": "user", "content": "Go."}], len(engine.seeds)
    for turn in range(3):
        reply = api.chat.completions.create(model="org/tiny-policy", messages=messages, max_tokens=3, seed=11)
        messages += [{"role": "assistant", "content": reply.choices[0].message.content}, {"role": "user", "content": f"next {turn}"}]
    seeds = engine.seeds[before:]
    assert len(seeds) == 3 and len(set(seeds)) == 3, seeds


def test_greedy_turns_are_recorded_at_temperature_zero_and_left_out_of_the_loss(running, tokenizer):
    """A T = 0 turn was recorded at T = 1 and trained as a sample; an argmax is no draw from
    softmax(logits). Recorded at its real 0, it trains nothing: one learner step over the whole
    session moves the weights exactly as one over its sampled turn alone."""
    import copy

    import torch

    from conftest import make_tiny_llama
    from rlyard.config import AlgoConfig
    from rlyard.orchestrate.run import rollout_metrics
    from rlyard.train import Learner

    _, _, base = running
    api, messages = client(base, "greedy"), [{"role": "user", "content": "Go."}]
    first = api.chat.completions.create(model="org/tiny-policy", messages=messages, max_tokens=4, temperature=0.8, seed=1)
    messages += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "Again."}]
    api.chat.completions.create(model="org/tiny-policy", messages=messages, max_tokens=4, temperature=0.0)
    [traj] = trajectories(base, "greedy")
    assert traj.turns == 2
    assert [t for t, m in zip(traj.temperatures, traj.loss_mask) if m] == [0.8] * 4 + [0.0] * 4
    assert rollout_metrics([traj])["rollout/greedy_tokens"] == 4.0
    greedy_at = [i for i, t in enumerate(traj.temperatures) if t == 0.0]
    sampled_only = Trajectory(**{**traj.to_dict(), "loss_mask": [0 if i in greedy_at else m for i, m in enumerate(traj.loss_mask)],
                                 "behaviour_logprobs": [0.0 if i in greedy_at else lp for i, lp in enumerate(traj.behaviour_logprobs)]})
    model = make_tiny_llama(len(tokenizer))
    moved = []
    for trajectory in (traj, sampled_only):
        copy_ = copy.deepcopy(model)
        metrics = Learner(copy_, AlgoConfig(lr=1e-3), 1.0, micro_batch_size=4).train_step([trajectory], [1.0])
        moved.append(copy_.lm_head.weight.detach())
    assert metrics["loss/grad_norm"] > 0
    assert torch.allclose(moved[0], moved[1], atol=1e-7)
