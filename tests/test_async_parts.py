"""Async mode's parts: the decoupled loss through the learner against a hand computation, partial
rollouts across a weight update (per-token versions), the shared engine's lock, config errors."""
from __future__ import annotations

import math
import threading

import pytest
import torch

from rlyard.agent.loop import AgentLimits, run_episodes
from rlyard.config import AlgoConfig, ConfigError, load_config
from rlyard.engines import HFEngine
from rlyard.environment import StepResult
from rlyard.orchestrate.rollout import render_prompt
from rlyard.orchestrate.workers import SharedEngine
from rlyard.train import Learner
from rlyard.train.learner import TokenScores
from rlyard.train.logprobs import continuation_logprobs
from rlyard.types import Reward, SamplingParams, Task, Trajectory

pytestmark = pytest.mark.timeout(120)


# --------------------------------------------------------------------------- decoupled PPO in the learner
def test_decoupled_loss_through_the_learner_equals_a_hand_computation(tiny_model, tokenizer):
    """pi_theta = the model now; pi_prox and pi_behav are set per token relative to it, so every
    branch of loss_t = sg(pi_prox / pi_behav) * max(-A u, -A clip(u, 0.8, 1.2)), u = pi_theta / pi_prox,
    has a known value. Token 0 is ALGORITHMS.md 2.7's example (behav -1.2, prox -1.0, theta -0.8)."""
    prompt = render_prompt(tokenizer, [{"role": "user", "content": "Say something."}])
    [[completion]] = HFEngine(tiny_model, tokenizer.pad_token_id).generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=4, seed=3))
    assert len(completion.token_ids) == 4
    learner = Learner(tiny_model, AlgoConfig(decoupled=True), 1.0, micro_batch_size=8)
    mask = [0] * len(prompt) + [1] * 4

    def theta_now() -> torch.Tensor:
        with torch.no_grad():
            return continuation_logprobs(tiny_model.eval(), prompt, [completion.token_ids], [[1] * 4], 1.0, with_entropy=False).logprobs[0]

    theta = theta_now()
    # per token: (log pi_prox - log pi_theta, log pi_behav - log pi_theta)
    offsets = [(-0.2, -0.4), (0.1, 0.0), (-0.05, 0.3), (0.5, 0.5)]
    prox = theta + torch.tensor([p for p, _ in offsets])
    behav = (theta + torch.tensor([b for _, b in offsets])).tolist()
    advantage = 1.0
    traj = Trajectory("t", "g", prompt + completion.token_ids, mask, [0.0] * len(prompt) + behav, [-1] * len(prompt) + [0] * 4, reward=1.0)

    def hand(cap=None):
        losses, clipped, weights = [], 0, []
        for p, b in offsets:
            w, u = math.exp(p - b), math.exp(-p)
            unclipped, clipped_value = -advantage * u, -advantage * min(max(u, 0.8), 1.2)
            loss = max(unclipped, clipped_value)
            clipped += clipped_value > unclipped
            if cap is not None and w > cap:
                loss, clipped = 0.0, clipped + (clipped_value <= unclipped)
            losses.append(w * loss)
            weights.append(w)
        return losses, clipped, weights

    losses, clipped, weights = hand()
    assert losses[0] == pytest.approx(-1.465683, abs=1e-6)  # the worked example
    metrics = learner.train_step([traj], [advantage], scores=TokenScores([prox], None, None))
    assert metrics["loss/policy"] == pytest.approx(sum(losses) / 4, abs=1e-5)
    assert metrics["loss/clip_fraction"] == pytest.approx(clipped / 4)
    assert metrics["train/behaviour_weight_mean"] == pytest.approx(sum(weights) / 4, abs=1e-5)
    assert metrics["train/behaviour_masked_fraction"] == 0.0

    # a cap masks tokens whose weight exceeds it: tokens 0 (w = e^0.2) and 1 (e^0.1 = 1.105 > 1.1)
    capped = Learner(tiny_model, AlgoConfig(decoupled=True, behaviour_weight_cap=1.1), 1.0, micro_batch_size=8)
    theta = theta_now()  # the first learner's step moved the weights
    prox = theta + torch.tensor([p for p, _ in offsets])
    traj.behaviour_logprobs = [0.0] * len(prompt) + (theta + torch.tensor([b for _, b in offsets])).tolist()
    losses, clipped, _ = hand(cap=1.1)
    metrics = capped.train_step([traj], [advantage], scores=TokenScores([prox], None, None))
    assert losses[0] == losses[1] == 0.0 and losses[3] != 0.0
    assert metrics["train/behaviour_masked_fraction"] == pytest.approx(2 / 4)
    assert metrics["loss/clip_fraction"] == pytest.approx(clipped / 4)
    assert metrics["loss/policy"] == pytest.approx(sum(losses) / 4, abs=1e-5)


def test_decoupled_needs_the_proximal_logprobs_only_for_several_updates(tiny_model):
    """One update per batch: pi_prox is the policy being updated. Two epochs: it must be scored first."""
    traj = Trajectory("t", "g", [1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], [-1, 0, 0], reward=1.0)
    single = Learner(tiny_model, AlgoConfig(decoupled=True), 1.0, micro_batch_size=8)
    assert single.score([traj]).old_logprobs is None
    assert math.isfinite(single.train_step([traj], [1.0])["loss/policy"])
    learner = Learner(tiny_model, AlgoConfig(decoupled=True, ppo_epochs=2), 1.0, micro_batch_size=8)
    with pytest.raises(ValueError, match="algo.decoupled"):
        learner.train_step([traj], [1.0])


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize("overrides, field", [
    (["orchestrate.mode=fast"], "orchestrate.mode"),
    (["orchestrate.max_staleness=-1"], "orchestrate.max_staleness"),
    (["orchestrate.staleness_policy=block"], "orchestrate.staleness_policy"),
    (["orchestrate.workers=0"], "orchestrate.workers"),
    (["algo.tis_cap=2", "algo.decoupled=true"], "algo.decoupled"),
    (["algo.loss=dual_clip", "algo.decoupled=true"], "algo.decoupled"),
    (["algo.behaviour_weight_cap=5"], "algo.behaviour_weight_cap"),
])
def test_invalid_orchestrate_and_off_policy_settings_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(None, overrides)


def test_defaults_keep_sync_mode():
    o = load_config(None, []).orchestrate
    assert (o.mode, o.max_staleness, o.staleness_policy, o.partial_rollouts) == ("sync", 4, "drop", True)
    assert load_config(None, ["algo.decoupled=true", "algo.behaviour_weight_cap=5"]).algo.behaviour_weight_cap == 5


# --------------------------------------------------------------------------- partial rollouts
class PushingEnv:
    """Three turns; after each reply it asks a learner thread for new weights and (optionally) waits
    for them, so the update lands exactly between two turns."""

    def __init__(self, push, wait: bool):
        self.push, self.wait, self.replies = push, wait, 0

    def reset(self, task):
        return list(task.prompt)

    def step(self, reply):
        self.replies += 1
        done = self.push()
        if self.wait:
            assert done.wait(10), "the weight update did not land"
        if self.replies >= 3:
            return StepResult(done=True, reason="submitted")
        return StepResult(messages=[{"role": "tool", "content": f"result {self.replies}"}], done=False)

    def score(self):
        return Reward(1.0)

    def close(self):
        pass


def play_pushing_episodes(tiny_model, tokenizer, pinned: bool):
    shared = SharedEngine(HFEngine(tiny_model, tokenizer.pad_token_id))
    pushes: list[threading.Thread] = []

    def push():  # a learner publishing version + 1 from its own thread
        done = threading.Event()
        version = shared.policy_version + len(pushes) + 1 if pinned else shared.policy_version + 1
        thread = threading.Thread(target=lambda: (shared.update_weights(version), done.set()))
        pushes.append(thread)
        thread.start()
        return done

    # every token id stops a turn: each reply is one token, and the conversation goes on
    params = SamplingParams(temperature=1.0, max_new_tokens=4, stop_token_ids=tuple(range(len(tokenizer))), seed=0)
    task = Task("t", [{"role": "user", "content": "Go."}], "pushing")
    envs = [PushingEnv(push, wait=not pinned) for _ in range(2)]
    limits = AgentLimits(max_turns=5, max_tokens_per_turn=4, max_total_tokens=4000)
    if pinned:
        with shared.pinned():
            trajs = run_episodes(shared, tokenizer, envs, [task, task], ["g", "g"], params, limits)
    else:
        trajs = run_episodes(shared, tokenizer, envs, [task, task], ["g", "g"], params, limits)
    for thread in pushes:
        thread.join(10)
    assert not any(thread.is_alive() for thread in pushes)
    return shared, trajs


def test_partial_rollouts_record_the_version_of_every_turn(tiny_model, tokenizer):
    shared, trajs = play_pushing_episodes(tiny_model, tokenizer, pinned=False)
    for traj in trajs:
        assert traj.turns == 3 and traj.finish_reason == "submitted"
        sampled = [v for v, m in zip(traj.policy_versions, traj.loss_mask) if m]
        # two episodes per turn each push once, so turn k (0-based) sampled with version 2k
        assert sampled == [0, 2, 4], traj.policy_versions
        assert all(v == -1 for v, m in zip(traj.policy_versions, traj.loss_mask) if not m)
    assert shared.policy_version == 6


def test_pinned_episodes_keep_one_version_and_updates_wait(tiny_model, tokenizer):
    shared, trajs = play_pushing_episodes(tiny_model, tokenizer, pinned=True)
    for traj in trajs:
        assert [v for v, m in zip(traj.policy_versions, traj.loss_mask) if m] == [0, 0, 0]
    # the six updates (racing threads, versions 1-6) all landed once the episodes let go
    assert 1 <= shared.policy_version <= 6


def test_weights_never_change_under_a_forward_pass(tiny_model, tokenizer):
    """Writers wait for readers: update_weights blocks while a generate call is in flight."""
    shared = SharedEngine(HFEngine(tiny_model, tokenizer.pad_token_id))
    order = []
    with shared.pinned():
        writer = threading.Thread(target=lambda: (shared.update_weights(1), order.append("update")))
        writer.start()
        writer.join(0.3)
        assert writer.is_alive() and shared.policy_version == 0
        order.append("forward done")
    writer.join(5)
    assert order == ["forward done", "update"] and shared.policy_version == 1


def test_the_shared_engine_passes_the_servers_streaming_hook_on(tiny_model, tokenizer):
    """`rlyard serve --learn` serves through SharedEngine: the scheduler streams tokens through
    `on_step` only where the wrapped engine takes it, and SharedEngine hands it over."""
    from rlyard.engines.base import accepts_hook

    shared = SharedEngine(HFEngine(tiny_model, tokenizer.pad_token_id))
    assert accepts_hook(shared)
    seen = []
    prompt = tokenizer("Hello", add_special_tokens=False).input_ids
    [[completion]] = shared.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=4), 1,
                                     on_step=lambda outputs: seen.extend(token for _, token, _ in outputs) or [])
    assert seen == completion.token_ids and len(seen) == 4

    class NoHook:
        policy_version = 0

        def generate(self, prompts, params, n=1):
            return [[] for _ in prompts]

    assert not accepts_hook(SharedEngine(NoHook()))  # so the scheduler never hands it a hook
