"""Advantages for the learner: the estimator named by `algo.advantage`, per sequence or per token.

Infra-failed episodes leave their group first; rewards get DAPO's soft overlong penalty here;
the token-level estimators (GAE, REINFORCE++) read the learner's no-grad pass (KL, values).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from rlyard.algos import grpo, kl_estimate
from rlyard.algos.advantages import dr_grpo, gae, reinforce_pp, reinforce_pp_baseline, remax, rloo, whiten
from rlyard.algos.filters import soft_overlong_penalty
from rlyard.algos.kl import kl_token_rewards
from rlyard.config import RunConfig, soft_overlong_lengths
from rlyard.envs import get_family
from rlyard.train.learner import TokenScores, sampled_behaviour_logprobs
from rlyard.types import Trajectory


def soft_overlong_budget(config: RunConfig) -> tuple[int, int]:
    """(L_max, L_cache) for this run's family; |y| is always the sample's sampled tokens."""
    return soft_overlong_lengths(config, get_family(config.env.name).multi_turn)


def training_rewards(config: RunConfig, batch: list[Trajectory]) -> list[float]:
    """The verifier's rewards plus, with algo.soft_overlong, DAPO's length penalty (Eq. 13) on the
    sampled tokens against `soft_overlong_budget`. Dynamic sampling reads the verifier's rewards
    (the accuracy) instead: see `orchestrate.sampling.informative_groups`."""
    rewards = [t.reward for t in batch]
    if not config.algo.soft_overlong:
        return rewards
    max_len, cache_len = soft_overlong_budget(config)
    penalties = soft_overlong_penalty([t.num_sampled_tokens for t in batch], max_len, cache_len)
    return [reward + penalty for reward, penalty in zip(rewards, penalties)]


@dataclass(frozen=True)
class TrainTargets:
    """What `compute_advantages` hands the learner, one entry per trajectory of the batch."""

    advantages: list[float | torch.Tensor]  # a float per sequence, or a (L_i,) tensor per sampled token
    returns: list[torch.Tensor] | None = None  # (L_i,) the critic's value targets (GAE); None without a critic
    metrics: dict[str, float] = field(default_factory=dict)  # reward/kl_penalty, reward/overlong_penalty ...


def compute_advantages(
    config: RunConfig, batch: list[Trajectory], scores: TokenScores | None = None, greedy: dict[str, float] | None = None,
) -> TrainTargets:
    """Advantages by algo.advantage. Infra-failed episodes leave their group first: they are not
    the policy's fault, and get advantage 0. `scores` (the learner's no-grad pass) gives the KL
    penalty and the critic's values; `greedy` (group id -> greedy reward) is ReMax's baseline."""
    algo = config.algo
    valid = [i for i, t in enumerate(batch) if not t.infra_error]
    advantages: list[float | torch.Tensor] = [0.0] * len(batch)
    if not valid:  # nothing to learn from; a critic still gets (unused) targets
        return TrainTargets(advantages, [torch.zeros(t.num_sampled_tokens) for t in batch] if algo.advantage == "gae" else None)
    rewards = training_rewards(config, batch)
    metrics = {"reward/overlong_penalty": statistics.fmean(rewards[i] - batch[i].reward for i in valid)} if algo.soft_overlong else {}
    # The estimators count episodes: a harness episode's segments share its one reward (see token_level_advantages).
    if algo.advantage not in ("grpo", "dr_grpo", "rloo", "remax"):
        targets = token_level_advantages(config, batch, valid, rewards, scores)
        return TrainTargets(targets.advantages, targets.returns, metrics | targets.metrics)
    firsts, owner = episodes(batch, valid)
    rewards_E = torch.tensor([rewards[i] for i in firsts], dtype=torch.float32)
    groups_E = [batch[i].group_id for i in firsts]
    if algo.advantage == "grpo":
        per_episode_E = grpo(rewards_E, groups_E, std_normalize=algo.std_normalize)
    elif algo.advantage == "dr_grpo":
        per_episode_E = dr_grpo(rewards_E, groups_E)
    elif algo.advantage == "rloo":
        per_episode_E = rloo(rewards_E, groups_E)
    else:
        if greedy is None:
            raise ValueError("advantage remax needs the greedy decode's reward of each group (sample_batch returns them)")
        per_episode_E = remax(rewards_E, torch.tensor([greedy[g] for g in groups_E]))
    values_E = per_episode_E.tolist()
    for i in valid:
        advantages[i] = values_E[owner[i]]
    return TrainTargets(advantages, None, metrics)


def episode_key(batch: list[Trajectory], i: int) -> str:
    """Which episode trajectory `i` is a segment of (one of its own unless it carries an episode_id)."""
    return batch[i].episode_id or f"#{i}"


def episodes(batch: list[Trajectory], indices: list[int]) -> tuple[list[int], dict[int, int]]:
    """The first segment of each episode among `indices`, and for each index its episode's position there."""
    firsts, position, owner = [], {}, {}
    for i in indices:
        key = episode_key(batch, i)
        if key not in position:
            position[key] = len(firsts)
            firsts.append(i)
        owner[i] = position[key]
    return firsts, owner


def token_level_advantages(
    config: RunConfig, batch: list[Trajectory], valid: list[int], rewards: list[float], scores: TokenScores | None,
) -> TrainTargets:
    """The estimators with time structure, on right-padded (episodes, tokens) tensors.

    One row per episode: a harness episode whose history was rewritten comes back as several
    segments, and its row is their sampled tokens in order. So its reward is paid once, at the
    episode's last token (not at the end of every segment); returns and GAE run across segments
    (the KL of later segments counts, the next segment's first value is the bootstrap);
    REINFORCE++-baseline's group mean counts the episode once; and the batch whitening sees each
    token once, as before. The row's advantages and returns are cut back into its segments."""
    algo = config.algo
    firsts, owner = episodes(batch, valid)
    members_E: list[list[int]] = [[] for _ in firsts]
    for i in valid:
        members_E[owner[i]].append(i)

    def rows(per_index: dict[int, torch.Tensor]) -> torch.Tensor:
        return pad([torch.cat([per_index[i].detach().float().cpu() for i in members]) for members in members_E])

    mask_ET = rows({i: torch.ones(batch[i].num_sampled_tokens) for i in valid})
    kl_V, metrics = kl_penalty(config, batch, valid, scores)
    kl_ET = rows(dict(zip(valid, kl_V)))
    rewards_E = torch.tensor([rewards[i] for i in firsts], dtype=torch.float32)  # every segment carries its episode's reward
    beta = algo.kl_coef if algo.kl_in_reward else 0.0
    returns_ET = None
    if algo.advantage == "reinforce_pp_baseline":
        advantages_ET = reinforce_pp_baseline(rewards_E, [batch[i].group_id for i in firsts], mask_ET)
    elif algo.advantage == "reinforce_pp":
        advantages_ET = reinforce_pp(rewards_E, kl_ET, mask_ET, beta, algo.gamma)
    elif algo.advantage == "gae":
        if scores is None or scores.values is None:
            raise ValueError("advantage gae needs the critic's values: pass scores=learner.score(batch)")
        values_ET = rows({i: scores.values[i] for i in valid})
        token_rewards_ET = kl_token_rewards(rewards_E, kl_ET, mask_ET, beta)
        raw_ET, returns_ET = gae(token_rewards_ET, values_ET, mask_ET, algo.gamma, algo.lam)
        advantages_ET = whiten(raw_ET, mask_ET)  # A is whitened; the value targets are not
    else:
        raise ValueError(f"unknown advantage estimator {algo.advantage!r}")
    advantages: list[float | torch.Tensor] = [torch.zeros(t.num_sampled_tokens) for t in batch]
    returns = [torch.zeros(t.num_sampled_tokens) for t in batch] if returns_ET is not None else None
    for row, members in enumerate(members_E):
        start = 0
        for i in members:
            end = start + batch[i].num_sampled_tokens
            advantages[i] = advantages_ET[row, start:end]
            if returns is not None:
                returns[i] = returns_ET[row, start:end]
            start = end
    return TrainTargets(advantages, returns, metrics)


def kl_penalty(config: RunConfig, batch: list[Trajectory], valid: list[int], scores: TokenScores | None,
               ) -> tuple[list[torch.Tensor], dict[str, float]]:
    """Per valid trajectory, (L_i,) kl_t between the sampling policy (the trainer's recompute when
    there is one, else the engine's logprobs) and the reference, for KL in the reward; zeros when that is off."""
    algo = config.algo
    lengths = [batch[i].num_sampled_tokens for i in valid]
    if not (algo.kl_in_reward and algo.kl_coef > 0):
        return [torch.zeros(n) for n in lengths], {}
    if scores is None or scores.reference_logprobs is None:
        raise ValueError("algo.kl_in_reward needs the reference logprobs: pass scores=learner.score(batch)")
    kl_V = []
    for i in valid:
        old_T = scores.old_logprobs[i] if scores.old_logprobs is not None else sampled_behaviour_logprobs(batch[i])
        kl_V.append(kl_estimate(old_T.cpu(), scores.reference_logprobs[i].cpu(), algo.kl_estimator))
    flat = torch.cat(kl_V)
    return kl_V, {"reward/kl_penalty": algo.kl_coef * float(flat.mean()) if len(flat) else 0.0}


def pad(rows: list[torch.Tensor]) -> torch.Tensor:
    """(V, T) float32, right-padded with 0."""
    return torch.nn.utils.rnn.pad_sequence([row.detach().float().cpu() for row in rows], batch_first=True)
