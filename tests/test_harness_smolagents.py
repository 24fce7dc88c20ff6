"""smolagents against the gateway: its OpenAI-compatible model class, a ToolCallingAgent, one tool, two turns.

smolagents sends every message's content as a list of parts ([{"type": "text", "text": ...}]),
and asks for tool_choice="required" unless told otherwise; the gateway cannot force a tool call,
so the model is built with tool_choice="auto" (a smolagents model setting, the harness unchanged).
As in test_harness, the tiny model is taught its replies on the prompts the gateway recorded: the
call, then smolagents' final_answer tool. An untaught second reply is whatever the random model
writes, and smolagents itself crashes on some of it (a JSON blob whose "name" is an object). The
server's call ids come from a counter here, so the second prompt is the same in every run.
smolagents re-renders its history on every step (a tool call becomes "Calling tools: [...]" text
with the call's id), so its second call starts a new session segment: each is recorded apart.
"""
import itertools
import types
import uuid
from unittest import mock

import pytest
from smolagents import OpenAIModel, ToolCallingAgent, tool

from test_agent import STOP, teach
from test_harness import turn_prompts

from rlyard.agent.toolcalls import hermes_call
from rlyard.engines import HFEngine
from rlyard.harness.gateway import MODEL_NAME, Gateway

TASK = "How many words are in the text 'red green blue'?"
CALL = hermes_call("word_count", {"text": "red green blue"})
ANSWER = hermes_call("final_answer", {"answer": "3"})


@pytest.fixture
def call_tokens(tokenizer):
    return tokenizer(CALL, add_special_tokens=False).input_ids + [STOP[0]]


def play(tiny_model, tokenizer, session: str, max_steps: int, probe: bool = False):
    """One smolagents run on a fresh engine (it sees the weights as taught so far): its answer,
    the tool's calls, the session's recorded trajectories. A probe only wants the prompts, so
    smolagents failing on the untaught reply it ends with is no matter."""
    calls = []

    @tool
    def word_count(text: str) -> int:
        """Counts the words of a text.

        Args:
            text: the text whose words to count.
        """
        calls.append(text)
        return len(text.split())

    counter = itertools.count(1)  # the server's ids from a counter: every run renders the same prompts
    ids = types.SimpleNamespace(uuid4=lambda: uuid.UUID(int=next(counter)))
    with mock.patch("rlyard.serve.server.uuid", ids), Gateway(HFEngine(tiny_model, tokenizer.pad_token_id), tokenizer, STOP, 8192, 64) as gateway:
        model = OpenAIModel(model_id=MODEL_NAME, api_base=gateway.base_url(session), api_key="unused",
                            client_kwargs={"max_retries": 0}, temperature=0.0, max_tokens=64, tool_choice="auto")
        agent = ToolCallingAgent(tools=[word_count], model=model, max_steps=max_steps, verbosity_level=0)
        try:
            answer = gateway.serve_while(agent.run, TASK)  # the gateway's engine calls are made on this thread
        except Exception:
            if not probe:
                raise
            answer = None
        return answer, calls, gateway.trajectories(session)


def test_a_smolagents_tool_calling_agent_runs_its_tool_over_two_turns_through_the_gateway(tiny_model, tokenizer, call_tokens):
    # teach each reply on the prompt the gateway recorded for it: the call, then the final answer
    _, _, segments = play(tiny_model, tokenizer, "probe", max_steps=1, probe=True)
    first_prompt = turn_prompts(segments)[0]
    teach(tiny_model, tokenizer, [(first_prompt, CALL)])
    _, calls, segments = play(tiny_model, tokenizer, "probe-2", max_steps=2, probe=True)
    assert calls == ["red green blue"]
    second_prompt = turn_prompts(segments)[1]
    teach(tiny_model, tokenizer, [(first_prompt, CALL), (second_prompt, ANSWER)])

    answer, calls, segments = play(tiny_model, tokenizer, "run", max_steps=2)
    assert calls == ["red green blue"]  # the tool ran on the arguments the policy wrote
    assert str(answer) == "3"  # smolagents ended its run through its final_answer tool
    prompts = turn_prompts(segments)
    assert len(prompts) >= 2 and sum(s.turns for s in segments) == len(prompts)  # every model call recorded
    assert prompts[0] == first_prompt  # the same conversation renders to the same tokens
    # the second call saw the tool's result: smolagents sends it back as an observation
    assert "Observation:\n3" in tokenizer.decode(prompts[1]) and "word_count" in tokenizer.decode(prompts[1])
    first = segments[0]
    sampled = [t for t, m in zip(first.token_ids, first.loss_mask) if m]
    assert sampled[: len(call_tokens)] == call_tokens  # the reply kept exactly as sampled
    for segment in segments:
        assert len(segment.token_ids) == len(segment.loss_mask) == len(segment.behaviour_logprobs) == len(segment.policy_versions)
        assert segment.prompt_length > 0 and sum(segment.loss_mask) > 0
