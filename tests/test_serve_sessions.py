"""Session recording of `rlyard serve` through the official openai client: the token list stays
what the chat template renders, each token carries the temperature it was sampled at, and text
completions are recorded too. A real uvicorn server on a local port over the real HFEngine."""
import json
import urllib.request

import pytest
import torch

openai = pytest.importorskip("openai")

from rlyard.engines import HFEngine  # noqa: E402
from rlyard.serve import RlyardServer, serve  # noqa: E402
from rlyard.types import Trajectory  # noqa: E402

STOP = (2,)


@pytest.fixture
def running(tiny_model, tokenizer, tmp_path):
    app = RlyardServer(HFEngine(tiny_model, tokenizer.pad_token_id), tokenizer, "tiny", STOP, max_tokens_default=8,
                       record_dir=tmp_path / "recorded")
    httpd = serve(app, "127.0.0.1", 0).start()
    yield app, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.close()


def client(base: str, session: str):
    return openai.OpenAI(base_url=f"{base}/sessions/{session}/v1", api_key="unused", max_retries=0, timeout=60)


def trajectories(base: str, session: str) -> list[Trajectory]:
    rows = json.loads(urllib.request.urlopen(f"{base}/sessions/{session}/trajectories").read())["trajectories"]
    return [Trajectory.from_dict(row) for row in rows]


def test_a_reply_cut_by_max_tokens_gets_its_end_of_turn_before_the_next_messages(running, tokenizer):
    app, base = running
    api = client(base, "cut")
    messages = [{"role": "user", "content": "What is in the folder?"}]
    first = api.chat.completions.create(model="tiny", messages=messages, max_tokens=4, temperature=1.0, seed=0)
    reply = first.choices[0].message.content
    assert first.choices[0].finish_reason == "length"
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "a.txt b.txt"}]
    second = api.chat.completions.create(model="tiny", messages=messages, max_tokens=4, temperature=1.0, seed=1)
    [traj] = trajectories(base, "cut")
    assert traj.turns == 2
    template = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert tokenizer(reply, add_special_tokens=False).input_ids == traj.token_ids[traj.prompt_length :][:4], \
        "the test needs a reply that tokenises back to the sampled tokens"
    assert traj.token_ids[: second.usage.prompt_tokens] == list(template)
    end = traj.prompt_length + 4  # the end-of-turn token after the cut reply: rendered, not sampled
    assert traj.token_ids[end] == app.end_of_turn and traj.loss_mask[end] == 0 and traj.behaviour_logprobs[end] == 0.0
    assert sum(traj.loss_mask) == 8


def test_trajectories_carry_each_tokens_temperature_and_the_export_each_turns_sampling(running, tokenizer, tiny_model, tmp_path):
    app, base = running
    api = client(base, "temps")
    messages = [{"role": "user", "content": "Say something."}]
    first = api.chat.completions.create(model="tiny", messages=messages, max_tokens=5, temperature=0.7, top_p=0.9, seed=4,
                                        extra_body={"top_k": 50})
    messages += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "More."}]
    api.chat.completions.create(model="tiny", messages=messages, max_tokens=5, temperature=0.0)
    [traj] = trajectories(base, "temps")
    assert len(traj.temperatures) == len(traj.token_ids)
    turns = [t for t, m in zip(traj.temperatures, traj.loss_mask) if m]
    assert turns == [0.7] * 5 + [0.0] * 5  # the greedy turn at its real T = 0: the learner leaves it out (tests/test_gateway_clients.py)
    assert all(t == 1.0 for t, m in zip(traj.temperatures, traj.loss_mask) if not m)
    # the behaviour logprobs are under those temperatures: recompute them with the model
    with torch.no_grad():
        logits = tiny_model(torch.tensor([traj.token_ids])).logits[0, :-1].float()
    scaled = logits / torch.tensor([t or 1.0 for t in traj.temperatures[1:]])[:, None]
    recomputed = torch.log_softmax(scaled, -1).gather(-1, torch.tensor(traj.token_ids[1:])[:, None]).squeeze(-1)
    mask = torch.tensor(traj.loss_mask[1:], dtype=torch.bool)
    assert torch.allclose(recomputed[mask], torch.tensor(traj.behaviour_logprobs[1:])[mask], atol=1e-4)
    exported = json.loads(urllib.request.urlopen(f"{base}/sessions/temps/messages").read())
    assert exported == json.loads((tmp_path / "recorded" / "temps.json").read_text())
    sampling = exported["conversations"][0]["sampling"]
    assert [(s["temperature"], s["top_p"], s["top_k"], s["max_tokens"], s["tokens"]) for s in sampling] == [(0.7, 0.9, 50, 5, 5),
                                                                                                           (0.0, 1.0, 0, 5, 5)]
    assert traj.loss_mask[sampling[1]["start"]] == 1 and traj.loss_mask[sampling[1]["start"] - 1] == 0


def test_text_completions_are_recorded_and_continue_their_segment(running, tokenizer):
    app, base = running
    api = client(base, "text")
    first = api.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4, seed=1)
    prompt = "Once upon a time" + first.choices[0].text + " and then"
    second = api.completions.create(model="tiny", prompt=prompt, max_tokens=4, seed=2)
    [traj] = trajectories(base, "text")
    assert traj.turns == 2 and sum(traj.loss_mask) == first.usage.completion_tokens + second.usage.completion_tokens
    head = tokenizer("Once upon a time", add_special_tokens=False).input_ids
    bridge = tokenizer(" and then", add_special_tokens=False).input_ids
    one, two = first.usage.completion_tokens, second.usage.completion_tokens
    assert traj.loss_mask == [0] * len(head) + [1] * one + [0] * len(bridge) + [1] * two
    assert traj.token_ids[: len(head)] == head and traj.token_ids[len(head) + one : -two] == bridge
    assert second.usage.prompt_tokens == len(traj.token_ids) - two  # the prompt was the remembered tokens, not re-tokenised
    # token-id prompts continue by tokens; a prompt that does not extend the segment starts a new one
    ids = api.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=3, seed=3)
    [_, third] = trajectories(base, "text")
    longer = third.token_ids + [8, 9]
    api.completions.create(model="tiny", prompt=longer, max_tokens=3, seed=4)
    [_, third] = trajectories(base, "text")
    assert third.turns == 2 and third.token_ids[:3] == [5, 6, 7] and sum(third.loss_mask) == ids.usage.completion_tokens + 3
    api.completions.create(model="tiny", prompt="Something else", max_tokens=2)
    assert [t.turns for t in trajectories(base, "text")] == [2, 2, 1]
    exported = json.loads(urllib.request.urlopen(f"{base}/sessions/text/messages").read())
    assert exported["completions"][0]["text"] == prompt + second.choices[0].text and exported["conversations"] == []


def test_n_above_one_is_refused_in_a_session_and_a_session_without_calls_is_empty(running):
    app, base = running
    with pytest.raises(openai.BadRequestError) as error:
        client(base, "n").chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], n=2)
    assert error.value.body["param"] == "n"
    assert trajectories(base, "nobody") == [] and json.loads(urllib.request.urlopen(f"{base}/sessions").read()) == {"sessions": []}
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(f"{base}/sessions/a%20b/trajectories")
    assert bad.value.code == 400
