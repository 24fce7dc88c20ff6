"""Advantage and return estimators (formula sheet §1): from rewards (and groups) to advantages.

All of them live here, so that the reader of §1 finds each estimator next to the ones it is
compared with. The group baselines need several samples per prompt: GRPO (DeepSeekMath, Shao et
al., 2024), Dr. GRPO (Liu et al., 2025), RLOO (Ahmadian et al., 2024), REINFORCE++-baseline (Hu
et al., 2025); ReMax (Li et al., 2023) needs a greedy decode instead. The token-level ones, GAE
(Schulman et al., 2015) and REINFORCE++ (Hu et al., 2025), take per-token rewards (the KL penalty
of `rlyard.algos.kl`) and a critic's values or the batch's whitening as their baseline.

Shape suffixes: `_B` one value per sequence, `_BT` padded (sequences, tokens) with a 0/1 mask
`mask_BT`. Estimators that need time structure (GAE, discounted returns) take `_BT`; masked
positions never enter a sum and come back as 0.

Multi-turn masks may have 0s in the middle (observation tokens). Like verl, the recursions
*skip* those positions: V_{t+1}, A_{t+1} and the running return are carried across them, so a
masked token is invisible (OpenRLHF instead only zeroes everything after EOS).
"""
from __future__ import annotations

import torch

from rlyard.algos.kl import kl_token_rewards


def group_indices(group_ids: list[str]) -> list[list[int]]:
    """Positions of each group's members, groups in first-seen order."""
    groups: dict[str, list[int]] = {}
    for index, gid in enumerate(group_ids):
        groups.setdefault(gid, []).append(index)
    return list(groups.values())


def whiten(
    x_BT: torch.Tensor, mask_BT: torch.Tensor, unbiased: bool = True, eps: float = 1e-8,
) -> torch.Tensor:
    """(x - mu) / sigma over all valid tokens of the batch; masked positions come back as 0.

    unbiased=True (default, verl `masked_whiten`): (x - mu) / sqrt(var_{n-1} + eps).
    unbiased=False (OpenRLHF): (x - mu) * rsqrt(max(var_pop, eps)).
    With fewer than 2 valid tokens x - mu is 0 (or nothing is valid): the result is all 0.
    """
    mask = mask_BT.to(x_BT.dtype)
    count = mask.sum()
    if count < 1:
        return torch.zeros_like(x_BT)
    mean = (x_BT * mask).sum() / count
    centred_BT = (x_BT - mean) * mask
    sum_sq = (centred_BT**2).sum()
    if unbiased:
        var = sum_sq / (count - 1) if count > 1 else torch.zeros_like(sum_sq)
        return centred_BT * torch.rsqrt(var + eps)
    return centred_BT * torch.rsqrt((sum_sq / count).clamp(min=eps))


# --------------------------------------------------------------------------- §1.1 GAE
def gae(
    token_rewards_BT: torch.Tensor, values_BT: torch.Tensor, mask_BT: torch.Tensor, gamma: float = 1.0, lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al., arXiv:1506.02438).

    delta_t = r_t + gamma * V_{t+1} - V_t;  A_t = delta_t + gamma * lam * A_{t+1};  Ret_t = A_t + V_t.
    V and A past the last valid token are 0; t+1 means the next *valid* token (verl skips m=0).
    Returns raw (unwhitened) advantages and the value targets Ret; whiten A with `whiten`.
    """
    mask = mask_BT.to(values_BT.dtype)
    advantages_BT = torch.zeros_like(values_BT)
    next_value_B = torch.zeros_like(values_BT[:, 0])
    next_adv_B = torch.zeros_like(values_BT[:, 0])
    for t in reversed(range(values_BT.shape[1])):
        m_B = mask[:, t]
        delta_B = token_rewards_BT[:, t] + gamma * next_value_B - values_BT[:, t]
        adv_B = delta_B + gamma * lam * next_adv_B
        # a masked position leaves the carried V_{t+1}, A_{t+1} untouched
        next_value_B = m_B * values_BT[:, t] + (1 - m_B) * next_value_B
        next_adv_B = m_B * adv_B + (1 - m_B) * next_adv_B
        advantages_BT[:, t] = m_B * adv_B
    returns_BT = (advantages_BT + values_BT) * mask
    return advantages_BT, returns_BT


# --------------------------------------------------------------------------- §1.2 GRPO, §1.3 Dr. GRPO, §1.4 RLOO
def grpo(rewards_B: torch.Tensor, group_ids: list[str], std_normalize: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """GRPO (DeepSeekMath): R_i minus its group's mean, optionally over the sample (n-1) std.

    A group of one has no baseline: its advantage is 0 (it teaches nothing relative to itself).
    `std_normalize=False` is Dr. GRPO's advantage.
    """
    advantages_B = torch.zeros_like(rewards_B, dtype=torch.float32)
    for members in group_indices(group_ids):
        rewards_G = rewards_B[members].float()
        if len(members) < 2:
            continue
        centred_G = rewards_G - rewards_G.mean()
        if std_normalize:
            centred_G = centred_G / (rewards_G.std(unbiased=True) + eps)
        advantages_B[members] = centred_G
    return advantages_B


def dr_grpo(rewards_B: torch.Tensor, group_ids: list[str]) -> torch.Tensor:
    """Dr. GRPO (Liu et al., arXiv:2503.20783): A_i = R_i - mean_group R, no std division.

    Pair it with the constant (L_max) loss aggregation to remove the 1/|o_i| length bias too.
    """
    return grpo(rewards_B, group_ids, std_normalize=False)


def rloo(rewards_B: torch.Tensor, group_ids: list[str]) -> torch.Tensor:
    """RLOO (Ahmadian et al., arXiv:2402.14740): A_i = R_i - mean_{j != i} R_j = G/(G-1) (R_i - mean).

    A group of one has no other sample to serve as baseline: its advantage is 0.
    """
    advantages_B = torch.zeros_like(rewards_B, dtype=torch.float32)
    for members in group_indices(group_ids):
        size = len(members)
        if size < 2:
            continue
        rewards_G = rewards_B[members].float()
        advantages_B[members] = size / (size - 1) * (rewards_G - rewards_G.mean())
    return advantages_B


# --------------------------------------------------------------------------- §1.5 REINFORCE++, §1.6 its baseline variant
def discounted_returns(token_rewards_BT: torch.Tensor, mask_BT: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Ret_t = sum_{s >= t, valid} gamma^(#valid steps from t to s) * r_s; masked positions are skipped and 0.

    (verl's REINFORCE++ resets the running return at every m=0, which cuts multi-turn returns
    at the first observation; we carry it across, consistent with `gae`.)
    """
    mask = mask_BT.to(token_rewards_BT.dtype)
    returns_BT = torch.zeros_like(token_rewards_BT)
    running_B = torch.zeros_like(token_rewards_BT[:, 0])
    for t in reversed(range(token_rewards_BT.shape[1])):
        m_B = mask[:, t]
        running_B = m_B * (token_rewards_BT[:, t] + gamma * running_B) + (1 - m_B) * running_B
        returns_BT[:, t] = m_B * running_B
    return returns_BT


def reinforce_pp(
    rewards_B: torch.Tensor, kl_BT: torch.Tensor, mask_BT: torch.Tensor, beta: float, gamma: float = 1.0,
    unbiased: bool = True,
) -> torch.Tensor:
    """REINFORCE++ (Hu et al., arXiv:2501.03262): critic-free, globally whitened returns.

    r_t = -beta * kl_t + [t = last] * R_i;  Ret_t = sum_{s >= t} gamma^(s-t) r_s;
    A = whiten(Ret) over all valid tokens of the batch (unbiased=True verl, False OpenRLHF).
    """
    token_rewards_BT = kl_token_rewards(rewards_B, kl_BT, mask_BT, beta)
    return whiten(discounted_returns(token_rewards_BT, mask_BT, gamma), mask_BT, unbiased=unbiased)


def reinforce_pp_baseline(
    rewards_B: torch.Tensor, group_ids: list[str], mask_BT: torch.Tensor, unbiased: bool = True,
) -> torch.Tensor:
    """REINFORCE++-baseline (arXiv:2501.03262; verl `reinforce_plus_plus_baseline`).

    R'_i = R_i - mean_{group} R, broadcast to the valid tokens of sequence i, then whitened over
    all valid tokens of the batch, so longer sequences weigh more in mu and sigma.
    A group of one keeps R'_i = R_i (verl: mean := 0); the global whitening is its baseline.
    """
    centred_B = rewards_B.float().clone()
    for members in group_indices(group_ids):
        if len(members) > 1:
            centred_B[members] = centred_B[members] - centred_B[members].mean()
    mask = mask_BT.float()
    return whiten(centred_B[:, None] * mask, mask, unbiased=unbiased)


# --------------------------------------------------------------------------- §1.7 ReMax
def remax(rewards_B: torch.Tensor, greedy_rewards_B: torch.Tensor) -> torch.Tensor:
    """ReMax (Li et al., arXiv:2310.10505): A_i = R_i - R(x_i, greedy decode of x_i).

    With an outcome reward the undiscounted return-to-go is R_i at every token, so the advantage
    is per sequence (verl `remax`: no discount, no normalisation).
    """
    return rewards_B.float() - greedy_rewards_B.float()
