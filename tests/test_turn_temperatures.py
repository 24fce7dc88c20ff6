"""A trajectory whose turns were sampled at different temperatures (a harness behind `rlyard serve`
asks for its own) is trained under each token's own temperature, not the run's."""
from __future__ import annotations

import pytest
import torch

from rlyard.config import AlgoConfig
from rlyard.engines import HFEngine
from rlyard.orchestrate.rollout import render_prompt
from rlyard.train import Learner
from rlyard.train.learner import make_microbatches
from rlyard.train.logprobs import continuation_logprobs
from rlyard.types import SamplingParams, Trajectory
from tests.test_engine import full_forward_logprobs


def two_turns(tiny_model, tokenizer) -> tuple[Trajectory, list[int], list[int], list[int]]:
    """Turn 1 sampled at T 0.5, a tool message, turn 2 at T 1.3, both by the real engine."""
    engine = HFEngine(tiny_model, tokenizer.pad_token_id)
    prompt = render_prompt(tokenizer, [{"role": "user", "content": "List three colours."}])
    first = engine.generate([prompt], SamplingParams(temperature=0.5, max_new_tokens=5, seed=1))[0][0]
    tool = tokenizer.encode("\nobservation", add_special_tokens=False)
    second_prompt = prompt + first.token_ids + tool
    second = engine.generate([second_prompt], SamplingParams(temperature=1.3, max_new_tokens=5, seed=2))[0][0]
    tokens = second_prompt + second.token_ids
    mask = [0] * len(prompt) + [1] * len(first.token_ids) + [0] * len(tool) + [1] * len(second.token_ids)
    logprobs = [0.0] * len(prompt) + first.logprobs + [0.0] * len(tool) + second.logprobs
    temperatures = [1.0] * len(prompt) + [0.5] * len(first.token_ids) + [1.0] * len(tool) + [1.3] * len(second.token_ids)
    traj = Trajectory(task_id="t", group_id="g", token_ids=tokens, loss_mask=mask, behaviour_logprobs=logprobs,
                      policy_versions=[0 if m else -1 for m in mask], reward=1.0, temperatures=temperatures)
    return traj, prompt, first.token_ids, second.token_ids


def test_each_token_is_scored_under_its_own_turns_temperature(tiny_model, tokenizer):
    traj, prompt, first, second = two_turns(tiny_model, tokenizer)
    micro = make_microbatches([traj], [0], 8)[0]
    with torch.no_grad():
        got = continuation_logprobs(tiny_model, micro.prefix, micro.continuations, micro.masks, 0.8,
                                    token_temperatures=micro.temperatures).logprobs[0]
    # by hand: a full forward per turn, log softmax(logits / that turn's T)
    expected = torch.cat([full_forward_logprobs(tiny_model, prompt, first, 0.5),
                          full_forward_logprobs(tiny_model, traj.token_ids[: len(traj.token_ids) - len(second)], second, 1.3)])
    assert got == pytest.approx(expected, abs=1e-4)
    assert got == pytest.approx(torch.tensor([lp for lp, m in zip(traj.behaviour_logprobs, traj.loss_mask) if m]), abs=1e-4)
    with torch.no_grad():  # the run's temperature would be off
        plain = continuation_logprobs(tiny_model, micro.prefix, micro.continuations, micro.masks, 0.8).logprobs[0]
    assert (plain - expected).abs().max() > 0.05


def test_the_learner_sees_no_mismatch_with_the_recorded_temperatures(tiny_model, tokenizer):
    traj, *_ = two_turns(tiny_model, tokenizer)
    learner = Learner(tiny_model, AlgoConfig(lr=1e-4), temperature=0.8, micro_batch_size=4)
    assert learner.train_step([traj], [1.0])["train/logprob_mismatch"] < 1e-4


def test_temperatures_of_the_wrong_length_or_negative_are_refused(tiny_model, tokenizer):
    traj, *_ = two_turns(tiny_model, tokenizer)
    short = Trajectory(**{**traj.to_dict(), "temperatures": traj.temperatures[:-1]})
    with pytest.raises(ValueError, match="temperatures for"):
        make_microbatches([short], [0], 8)
    negative = Trajectory(**{**traj.to_dict(), "temperatures": [-1.0] * len(traj.token_ids)})
    with pytest.raises(ValueError, match="must be >= 0"):
        make_microbatches([negative], [0], 8)
    # T = 0 is a greedy turn: accepted, and left out of the loss (tests/test_gateway_clients.py)
    greedy = Trajectory(**{**traj.to_dict(), "temperatures": [0.0] * len(traj.token_ids)})
    assert make_microbatches([greedy], [0], 8)[0].temperatures[0] == [1.0] * (len(traj.token_ids) - traj.prompt_length)
