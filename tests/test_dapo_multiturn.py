"""DAPO's length handling and dynamic sampling for single- and multi-turn episodes, and the default
cap of decoupled PPO's behaviour weight, against numbers worked out by hand from the formulas.

Sources: DAPO (Yu et al., arXiv:2503.14476) §3.2 dynamic sampling (keep a group whose accuracy is
neither all 0 nor all 1), §3.3 overlong filtering, Eq. 13 soft overlong punishment; AReaL (Fu et
al., arXiv:2505.24298) decoupled PPO with its legacy behaviour-weight cap of 5. How rlyard reads
them for multi-turn episodes is in docs/algorithms.md.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rlyard.agent.loop import AgentLimits, run_episodes
from rlyard.algos import filters, policy_losses
from rlyard.config import AlgoConfig, load_config
from rlyard.environment import StepResult
from rlyard.orchestrate import sampling, targets
from rlyard.orchestrate.rollout import render_prompt
from rlyard.train import Learner
from rlyard.train.logprobs import continuation_logprobs
from rlyard.types import Completion, Reward, SamplingParams, Task, Trajectory


def single_turn(group: str, reward: float, length: int, finish: str = "stop") -> Trajectory:
    """A prompt of 3 tokens and one reply of `length` sampled tokens."""
    return Trajectory(task_id=group, group_id=group, token_ids=[1, 2, 3] + [7] * length, loss_mask=[0, 0, 0] + [1] * length,
                      behaviour_logprobs=[0.0] * 3 + [-1.0] * length, policy_versions=[-1] * 3 + [0] * length,
                      reward=reward, finish_reason=finish)


def episode(group: str, reward: float, replies: list[int], observation: int = 50, finish: str = "submitted") -> Trajectory:
    """A prompt of 3 tokens, then replies of the given sampled lengths with `observation` tool
    tokens (loss_mask 0) between them."""
    token_ids, mask = [1, 2, 3], [0, 0, 0]
    for k, length in enumerate(replies):
        if k:
            token_ids, mask = token_ids + [9] * observation, mask + [0] * observation
        token_ids, mask = token_ids + [7] * length, mask + [1] * length
    return Trajectory(task_id=group, group_id=group, token_ids=token_ids, loss_mask=mask,
                      behaviour_logprobs=[-1.0 if m else 0.0 for m in mask], policy_versions=[0 if m else -1 for m in mask],
                      reward=reward, finish_reason=finish, turns=len(replies))


def eq13(length: int, max_len: int, cache_len: int) -> float:
    """Eq. 13 written out: 0 up to L_max - L_cache, linear to -1 at L_max, -1 beyond."""
    if length <= max_len - cache_len:
        return 0.0
    if length <= max_len:
        return ((max_len - cache_len) - length) / cache_len
    return -1.0


# --------------------------------------------------------------------------- soft overlong punishment
def test_single_turn_penalty_in_its_three_regions():
    # L_max = 16, L_cache = 4: the window starts at 12. 13 -> -1/4, 14 -> -2/4, 16 -> -4/4; 17 and 20
    # are past L_max: -1 (the window's line would give -5/4 and -8/4).
    config = load_config(None, ["rollout.max_new_tokens=20", "algo.soft_overlong=true",
                                "algo.soft_overlong_max_len=16", "algo.soft_overlong_cache_len=4"])
    lengths = [10, 12, 13, 14, 16, 17, 20]
    expected = [0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0]
    assert [eq13(n, 16, 4) for n in lengths] == expected
    assert filters.soft_overlong_penalty(lengths, 16, 4) == expected
    rewards = targets.training_rewards(config, [single_turn("g", 1.0, n) for n in lengths])
    assert rewards == pytest.approx([1.0 + p for p in expected])
    # single-turn default: L_max = rollout.max_new_tokens (20), L_cache = 20 // 5 = 4, window from 16
    config = load_config(None, ["rollout.max_new_tokens=20", "algo.soft_overlong=true"])
    assert targets.soft_overlong_budget(config) == (20, 4)
    rewards = targets.training_rewards(config, [single_turn("g", 1.0, n) for n in (16, 17, 19, 20)])
    assert rewards == pytest.approx([1.0, 0.75, 0.25, 0.0])


def files_config(*extra: str):
    return load_config(None, ["env.name=files", "rollout.max_new_tokens=32", "agent.max_turns=4",
                              "agent.max_tokens_per_turn=100", "agent.max_total_tokens=2048", "algo.soft_overlong=true", *extra])


def test_multi_turn_penalty_counts_sampled_tokens_against_the_episode_budget():
    # files is multi-turn. The sampled-token budget of an episode: min(agent.max_total_tokens,
    # max_turns x max_tokens_per_turn) = min(2048, 4 x 100) = 400 = L_max; L_cache = 400 // 5 = 80,
    # window from 320. Tool tokens (loss_mask 0) do not count.
    config = files_config()
    assert targets.soft_overlong_budget(config) == (400, 80)
    batch = [episode("g", 1.0, [150, 150]),  # 300 sampled (+ 50 tool tokens): 0
             episode("g", 1.0, [100, 100, 120]),  # 320: 0, the window's start
             episode("g", 1.0, [200, 160], observation=500),  # 360 sampled, 860 tokens in all: (320 - 360) / 80 = -0.5
             episode("g", 0.0, [100, 100, 100, 100], finish="turn_limit")]  # 400 = L_max: -1
    assert [t.num_sampled_tokens for t in batch] == [300, 320, 360, 400]
    expected = [1.0, 1.0, 0.5, -1.0]
    assert [t.reward + eq13(t.num_sampled_tokens, 400, 80) for t in batch] == expected
    assert targets.training_rewards(config, batch) == pytest.approx(expected)
    # the old L_max (rollout.max_new_tokens = 32, a per-reply cap) gave every one of them -1
    assert filters.soft_overlong_penalty([300, 320, 360, 400], 32, 6) == [-1.0] * 4
    # the context budget is the tighter one: L_max = 300, L_cache = 60, window from 240
    config = files_config("agent.max_total_tokens=300")
    assert targets.soft_overlong_budget(config) == (300, 60)
    batch = [episode("g", 1.0, [120, 120]), episode("g", 1.0, [150, 120]), episode("g", 1.0, [150, 150], finish="token_budget")]
    assert targets.training_rewards(config, batch) == pytest.approx([1.0, 1.0 + (240 - 270) / 60, 0.0])
    # an explicit algo.soft_overlong_max_len wins for multi-turn too
    config = files_config("algo.soft_overlong_max_len=1000", "algo.soft_overlong_cache_len=20")
    assert targets.soft_overlong_budget(config) == (1000, 20)
    assert targets.training_rewards(config, [episode("g", 1.0, [490, 500])]) == pytest.approx([1.0 + (980 - 990) / 20])


def test_multi_turn_penalty_reaches_the_advantages_and_its_metric():
    config = files_config("algo=dapo")
    batch = [episode("g", 1.0, [150, 150]), episode("g", 1.0, [200, 160]), episode("g", 0.0, [100] * 4), episode("g", 0.0, [50])]
    shaped = [1.0, 0.5, -1.0, 0.0]
    mean = sum(shaped) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in shaped) / 3)
    out = targets.compute_advantages(config, batch)
    assert out.advantages == pytest.approx([(r - mean) / (std + 1e-6) for r in shaped], abs=1e-6)
    assert out.metrics["reward/overlong_penalty"] == pytest.approx((0.0 - 0.5 - 1.0 + 0.0) / 4)


# --------------------------------------------------------------------------- overlong filtering
def test_overlong_mask_for_both_kinds_of_finish():
    # single-turn: "length" (cut at max_new_tokens); multi-turn: the agent loop's "token_budget"
    # (out of agent.max_total_tokens) and "turn_token_limit" (a reply cut at max_tokens_per_turn)
    reasons = ["stop", "length", "token_budget", "turn_token_limit", "submitted", "turn_limit", "done", "infra_error"]
    assert filters.overlong_mask(reasons) == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert [filters.is_truncated(r) for r in reasons] == [False, True, True, True, False, False, False, False]


def test_overlong_filter_in_the_learner_drops_truncated_episodes(tiny_model):
    algo = AlgoConfig(overlong_filter=True)
    learner = Learner(tiny_model, algo, 1.0, micro_batch_size=8)
    lengths = [learner.trained_length(t) for t in (
        single_turn("g", 1.0, 5, finish="length"), single_turn("g", 1.0, 5, finish="stop"),
        episode("g", 1.0, [4, 6], finish="token_budget"), episode("g", 1.0, [4, 6], finish="turn_token_limit"),
        episode("g", 1.0, [4, 6], finish="submitted"), episode("g", 1.0, [4, 6], finish="turn_limit"))]
    assert lengths == [0, 5, 0, 0, 10, 10]
    plain = Learner(tiny_model, AlgoConfig(), 1.0, micro_batch_size=8)
    assert plain.trained_length(episode("g", 1.0, [4, 6], finish="token_budget")) == 10


class ScriptedEngine:
    """Returns, for every prompt, `length` tokens (id 7) with the given finish reason."""

    policy_version = 0

    def __init__(self, length: int, finish: str):
        self.length, self.finish = length, finish

    def generate(self, prompts, params, n=1):
        k = min(self.length, params.max_new_tokens)
        reason = self.finish if k == self.length else "length"
        return [[Completion([7] * k, [-1.0] * k, reason, 0) for _ in range(n)] for _ in prompts]


class ChattyEnv:
    """Answers every reply with a short tool message, never ends the episode itself."""

    def reset(self, task):
        return list(task.prompt)

    def step(self, reply):
        return StepResult(messages=[{"role": "tool", "content": "ok"}], done=False)

    def score(self):
        return Reward(value=1.0)

    def close(self):
        pass


def test_the_agent_loop_produces_the_finish_reasons_the_filter_masks(tokenizer):
    """The filter's multi-turn reasons are the ones the agent loop writes (not 'length')."""
    task = Task(id="t", prompt=[{"role": "user", "content": "Say something."}], env="chatty")
    params = SamplingParams(max_new_tokens=64, stop_token_ids=(2,))

    def finish(length, engine_finish, limits):
        [traj] = run_episodes(ScriptedEngine(length, engine_finish), tokenizer, [ChattyEnv()], [task], ["g"], params, limits)
        return traj.finish_reason

    prompt_tokens = len(render_prompt(tokenizer, task.prompt))
    cut_per_turn = finish(20, "stop", AgentLimits(max_turns=3, max_tokens_per_turn=8, max_total_tokens=10_000))
    out_of_budget = finish(6, "stop", AgentLimits(max_turns=50, max_tokens_per_turn=8, max_total_tokens=prompt_tokens + 30))
    ran_out_of_turns = finish(6, "stop", AgentLimits(max_turns=2, max_tokens_per_turn=8, max_total_tokens=10_000))
    assert (cut_per_turn, out_of_budget, ran_out_of_turns) == ("turn_token_limit", "token_budget", "turn_limit")
    assert filters.overlong_mask([cut_per_turn, out_of_budget, ran_out_of_turns]) == [0.0, 0.0, 1.0]


# --------------------------------------------------------------------------- dynamic sampling on accuracy
def test_dynamic_sampling_keeps_groups_by_accuracy_not_by_penalised_reward():
    # L_max = 16, L_cache = 4 (window from 12).
    # group a: accuracy [1, 0], lengths [16, 12] -> penalties [-1, 0] -> rewards [0, 0], all equal,
    #          but the accuracy varies: kept.
    # group b: accuracy [1, 1], lengths [12, 14] -> penalties [0, -0.5] -> rewards [1, 0.5], not
    #          equal, but the accuracy is all 1: dropped.
    config = load_config(None, ["rollout.max_new_tokens=16", "algo=dapo", "algo.soft_overlong_cache_len=4"])
    batch = [single_turn("a", 1.0, 16), single_turn("a", 0.0, 12), single_turn("b", 1.0, 12), single_turn("b", 1.0, 14)]
    assert targets.training_rewards(config, batch) == pytest.approx([0.0, 0.0, 1.0, 0.5])
    assert sampling.informative_groups(config, batch) == [True, True, False, False]
    # multi-turn, same rule (files: L_max 400, L_cache 80, window from 320):
    # group c: accuracy [0, 1], sampled [300, 400] -> penalties [0, -1] -> rewards [0, 0]: kept;
    # group d: accuracy [0, 0], sampled [300, 360] -> penalties [0, -0.5] -> rewards [0, -0.5]: dropped.
    config = files_config("algo=dapo")
    batch = [episode("c", 0.0, [150, 150]), episode("c", 1.0, [100] * 4), episode("d", 0.0, [150, 150]), episode("d", 0.0, [200, 160])]
    assert targets.training_rewards(config, batch) == pytest.approx([0.0, 0.0, 0.0, -0.5])
    assert sampling.informative_groups(config, batch) == [True, True, False, False]


def test_dynamic_sampling_keep_on_accuracies():
    # DAPO's +-1 accuracy reward (Eq. 7) and 0/1 work alike; a group of one is kept (verl-recipe)
    assert filters.dynamic_sampling_keep([1, -1, 1, 1, 1], ["x", "x", "y", "y", "solo"]) == [True, True, False, False, True]


# --------------------------------------------------------------------------- decoupled PPO's default cap
def test_decoupled_ppo_caps_the_behaviour_weight_at_5_by_default():
    # u = pi_theta / pi_prox = 1 (theta = prox), A = +1: loss_t = -w_t. w = e^1.5 = 4.481689 is kept,
    # w = e^1.7 = 5.473947 > 5 is masked (AReaL's legacy behave_imp_weight_cap = 5).
    assert policy_losses.DEFAULT_BEHAVIOUR_WEIGHT_CAP == 5.0
    prox = torch.tensor([-1.0, -1.0])
    behav = prox - torch.tensor([1.5, 1.7])
    loss, clipped = policy_losses.decoupled_ppo(prox.clone(), prox, behav, torch.tensor([1.0, 1.0]))
    assert loss.tolist() == pytest.approx([-math.exp(1.5), 0.0], abs=1e-5)
    assert clipped.tolist() == [0.0, 1.0]
    # weight_cap=None still means no cap
    loss, _ = policy_losses.decoupled_ppo(prox.clone(), prox, behav, torch.tensor([1.0, 1.0]), weight_cap=None)
    assert loss.tolist() == pytest.approx([-math.exp(1.5), -math.exp(1.7)], abs=1e-5)


def test_the_learner_applies_the_default_cap_and_an_explicit_one(tiny_model, tokenizer):
    """One update per batch: pi_prox is the update's own forward, so u = 1 and loss_t = -A w_t with
    w_t = pi_theta / pi_behav set per token: e^[1.5, 1.7, 0, 3] = [4.4817, 5.4739, 1, 20.0855]."""
    prompt = render_prompt(tokenizer, [{"role": "user", "content": "Say something."}])
    reply = [100, 200, 300, 400]
    with torch.no_grad():
        theta = continuation_logprobs(tiny_model.eval(), prompt, [reply], [[1] * 4], 1.0, with_entropy=False).logprobs[0]
    offsets = [1.5, 1.7, 0.0, 3.0]
    weights = [math.exp(o) for o in offsets]

    def run(cap):
        behav = (theta - torch.tensor(offsets)).tolist()
        traj = Trajectory("t", "g", prompt + reply, [0] * len(prompt) + [1] * 4, [0.0] * len(prompt) + behav,
                          [-1] * len(prompt) + [0] * 4, reward=1.0)
        algo = AlgoConfig(decoupled=True, lr=1e-12) if cap is None else AlgoConfig(decoupled=True, behaviour_weight_cap=cap, lr=1e-12)
        return Learner(tiny_model, algo, 1.0, micro_batch_size=8).train_step([traj], [1.0])

    default = run(None)  # cap 5: tokens 1 and 3 get no loss
    assert default["train/behaviour_masked_fraction"] == pytest.approx(2 / 4)
    assert default["loss/policy"] == pytest.approx(-(weights[0] + weights[2]) / 4, rel=1e-4)
    assert default["train/behaviour_weight_mean"] == pytest.approx(sum(weights) / 4, rel=1e-4)
    explicit = run(10.0)  # only token 3 (20.09) is masked
    assert explicit["train/behaviour_masked_fraction"] == pytest.approx(1 / 4)
    assert explicit["loss/policy"] == pytest.approx(-(weights[0] + weights[1] + weights[2]) / 4, rel=1e-4)
    assert AlgoConfig(decoupled=True).behaviour_weight_cap is None  # None in the config = the default cap


# --------------------------------------------------------------------------- docstrings cite papers, not a machine path
@pytest.mark.parametrize("name", ["test_algos.py", "test_algos_zoo.py", "test_zoo_train.py"])
def test_algorithm_tests_cite_papers_not_an_absolute_path(name):
    text = (Path(__file__).parent / name).read_text()
    assert str(Path(__file__).resolve().parent.parent.parent / "shared") not in text
    assert "docs/algorithms.md" in text


def test_the_config_check_measures_the_cache_against_the_episode_budget_in_multi_turn():
    from rlyard.config import ConfigError, load_config

    overrides = ["algo=dapo", "algo.soft_overlong=true", "algo.soft_overlong_cache_len=100"]
    files = load_config("configs/files.yaml", overrides)  # L_max = min(max_total_tokens, turns x tokens per turn) > 100
    assert files.algo.soft_overlong_cache_len == 100
    with pytest.raises((ConfigError, ValueError), match="L_max = 16"):  # single-turn: the reply's cap of 16
        load_config("configs/quickstart.yaml", overrides)
