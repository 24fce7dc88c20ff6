"""A harness episode's segments count as one episode in REINFORCE++, GAE and the FSDP loss weights (issue 37, item 3).

A harness that rewrites its history comes back as several segments (`Trajectory.episode_id`
shared). GRPO's group statistics already counted episodes; here the token-level estimators and
the multi-rank loss weights do too. Every expected number is worked out by hand in the comments.
Batch: group g0 holds episode A, one sampled token in each of its two segments a1, a2, reward 1,
and episode B, one segment of two tokens, reward 0 (and for REINFORCE++-baseline a second group
g1 of two one-token episodes, rewards 1 and 0).
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from rlyard.config import load_config
from rlyard.orchestrate.targets import compute_advantages
from rlyard.train.fsdp import global_token_weights
from rlyard.train.learner import TokenScores
from rlyard.types import Trajectory


def traj(group: str, sampled: int, reward: float, episode: str = "") -> Trajectory:
    return Trajectory(task_id=group, group_id=group, token_ids=[1] * (2 + sampled), loss_mask=[0, 0] + [1] * sampled,
                      behaviour_logprobs=[0.0] * (2 + sampled), policy_versions=[-1, -1] + [0] * sampled, reward=reward,
                      episode_id=episode)


def config(*overrides: str):
    return load_config(None, list(overrides))


def flat(advantages) -> list[float]:
    return [float(x) for a in advantages for x in a]


def test_reinforce_pp_baseline_counts_the_episode_once_in_its_group_mean():
    batch = [traj("g0", 1, 1.0, "A"), traj("g0", 1, 1.0, "A"), traj("g0", 2, 0.0), traj("g1", 1, 1.0), traj("g1", 1, 0.0)]
    # g0's mean over episodes (1, 0) is 0.5: A's tokens +0.5, B's -0.5; g1 likewise. The 6 tokens
    # (+.5, +.5, -.5, -.5, +.5, -.5) have mean 0 and unbiased variance 6 x 0.25 / 5 = 0.3, so
    # A = +-0.5 / sqrt(0.3) = +-0.91287. (Over segments g0's mean was 2/3: A's tokens +1/3, B's -2/3.)
    a = 0.5 / 0.3 ** 0.5
    advantages = compute_advantages(config("algo=reinforce_pp_baseline"), batch).advantages
    assert flat(advantages) == pytest.approx([a, a, -a, -a, a, -a], abs=1e-5)


def test_reinforce_pp_pays_the_reward_once_at_the_episodes_end():
    batch = [traj("g0", 2, 1.0, "A"), traj("g0", 1, 1.0, "A"), traj("g0", 3, 0.0)]
    # gamma 0.5, no KL: A's 3 tokens have returns (0.25, 0.5, 1), the reward paid at its last token only
    # (per segment they were (0.5, 1) and (1)); B's are (0, 0, 0). Mean 1.75 / 6 = 0.291667;
    # centred (-0.041667, 0.208333, 0.708333, -0.291667 x 3); unbiased variance 0.802083 / 5 = 0.160417.
    advantages = compute_advantages(config("algo=reinforce_pp", "algo.gamma=0.5", "algo.kl_coef=0"), batch).advantages
    sigma = 0.160417 ** 0.5
    expected = [x / sigma for x in (-0.041667, 0.208333, 0.708333, -0.291667, -0.291667, -0.291667)]
    assert flat(advantages) == pytest.approx(expected, abs=1e-4)
    assert [len(a) for a in advantages] == [2, 1, 3]  # cut back into the segments


def test_gae_runs_across_segments_with_one_reward():
    batch = [traj("g0", 2, 1.0, "A"), traj("g0", 1, 1.0, "A"), traj("g0", 2, 0.0)]
    values = [torch.tensor([0.2, 0.4]), torch.tensor([0.6]), torch.tensor([0.5, 0.5])]
    scores = TokenScores(old_logprobs=None, reference_logprobs=None, values=values)
    # gamma 1, lambda 0.5, delta_t = r_t + V_{t+1} - V_t, A_t = delta_t + 0.5 A_{t+1}.
    # A (V 0.2, 0.4, 0.6; reward 1 at its last token): deltas 0.2, 0.2, 0.4 -> A 0.4, 0.4, 0.4,
    #   returns A + V = 0.6, 0.8, 1.0 (per segment a1 ended in R - 0.4 = 0.6: A 0.5, 0.6, returns 0.7, 1.0).
    # B (V 0.5, 0.5; reward 0): deltas 0, -0.5 -> A -0.25, -0.5, returns 0.25, 0.
    targets = compute_advantages(config("algo=ppo", "algo.gamma=1.0", "algo.lam=0.5"), batch, scores)
    assert flat(targets.returns) == pytest.approx([0.6, 0.8, 1.0, 0.25, 0.0], abs=1e-6)
    # whitened: mean 0.45 / 5 = 0.09; centred (0.31 x 3, -0.34, -0.59); unbiased variance 0.752 / 4 = 0.188
    sigma = 0.188 ** 0.5
    assert flat(targets.advantages) == pytest.approx([x / sigma for x in (0.31, 0.31, 0.31, -0.34, -0.59)], abs=1e-5)


@pytest.fixture
def one_rank_group():
    """A real gloo process group of one rank in this process (an in-memory store: no port)."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("mode, expected", [
    # episodes A (segments of 2 and 1 tokens) and B (3 tokens): each episode's tokens weigh 1 / (3 x 2)
    # (per segment: 1 / (2 x 3), 1 / (1 x 3), 1 / (3 x 3))
    ("seq-mean-token-mean", [1 / 6, 1 / 6, 1 / 6]),
    ("seq-mean-token-sum", [1 / 2, 1 / 2, 1 / 2]),  # 1 / episodes (per segment 1 / 3)
    ("constant", [1 / 20, 1 / 20, 1 / 20]),  # 1 / (episodes x L_max 10) (per segment 1 / 30)
    ("token-mean", [1 / 6, 1 / 6, 1 / 6]),  # 1 / tokens, whatever the episodes
])
def test_the_multi_rank_loss_weights_count_episodes(one_rank_group, mode, expected):
    weights = global_token_weights([2, 1, 3], ["g0"] * 3, mode, 10.0, one_rank_group, ["A", "A", ""])
    assert weights == pytest.approx(expected)
