"""KL to the reference policy (formula sheet §4): Schulman's estimators, and KL as a token reward.

One module for both uses of the same quantity. As a loss term (GRPO, DeepSeekMath, Shao et al.,
2024: k3) the gradient flows through the current log pi; as a reward penalty (RLHF-PPO,
Ouyang et al., 2022; REINFORCE++, Hu et al., 2025: k1) it is computed once, without gradient,
from the old log-probs, and `rlyard.algos.advantages` turns the token rewards into returns. The
estimators follow Schulman, "Approximating KL Divergence" (2020, joschu.net/blog/kl-approx.html).

Shape suffixes: `_N` one value per sampled token (flattened), `_B` one value per sequence,
`_BT` padded (sequences, tokens) with a 0/1 mask `mask_BT`.
"""
from __future__ import annotations

import torch

from rlyard.algos.policy_losses import LOG_RATIO_CLAMP


def kl_estimate(logprobs_N: torch.Tensor, ref_logprobs_N: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Schulman's estimators of KL(pi || ref) from samples of pi, with delta = log pi - log ref.

    k1 = delta (unbiased), k2 = delta^2 / 2 (biased, low variance), k3 = exp(-delta) - 1 + delta
    (unbiased, always >= 0; GRPO's choice).
    """
    delta_N = (logprobs_N - ref_logprobs_N).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if estimator == "k1":
        return delta_N
    if estimator == "k2":
        return 0.5 * delta_N**2
    if estimator == "k3":
        return (torch.exp(-delta_N) - 1.0 + delta_N).clamp(max=10.0)
    raise ValueError(f"unknown KL estimator {estimator!r}; allowed: k1, k2, k3")


def last_valid_index(mask_BT: torch.Tensor) -> torch.Tensor:
    """Index of each row's last valid token; -1 for a row with no valid token."""
    positions_T = torch.arange(mask_BT.shape[1], device=mask_BT.device)
    return torch.where(mask_BT > 0, positions_T, -1).max(dim=1).values


def kl_token_rewards(rewards_B: torch.Tensor, kl_BT: torch.Tensor, mask_BT: torch.Tensor, beta: float) -> torch.Tensor:
    """RLHF token rewards r_t = -beta * kl_t on every valid token, + R_i on the last valid token.

    kl_t is the k1 estimate log pi_old - log pi_ref (no gradient); used by PPO (§1.1) and
    REINFORCE++ (§1.5).
    """
    mask = mask_BT.to(kl_BT.dtype)
    token_rewards_BT = -beta * kl_BT * mask
    last_B = last_valid_index(mask_BT)
    rows_B = torch.nonzero(last_B >= 0).flatten()
    token_rewards_BT[rows_B, last_B[rows_B]] += rewards_B[rows_B].to(kl_BT.dtype)
    return token_rewards_BT
