"""Per-token policy losses and KL estimators: pure tensor functions, minimised.

Shape suffix `_N`: one value per sampled token (tokens of all sequences, flattened).
"""
from __future__ import annotations

import torch

LOG_RATIO_CLAMP = 20.0  # verl and OpenRLHF clamp log pi/pi_old before exp; so do we


def ppo_clip(
    logprobs_N: torch.Tensor, old_logprobs_N: torch.Tensor, advantages_N: torch.Tensor,
    eps_low: float = 0.2, eps_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate: max(-A*rho, -A*clip(rho, 1-eps_low, 1+eps_high)).

    Returns the per-token loss and a 0/1 tensor marking tokens where the clipped branch won
    (no gradient flows through them): the clip fraction metric.
    """
    log_ratio_N = (logprobs_N - old_logprobs_N).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio_N = torch.exp(log_ratio_N)
    unclipped_N = -advantages_N * ratio_N
    clipped_N = -advantages_N * ratio_N.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss_N = torch.maximum(unclipped_N, clipped_N)
    return loss_N, (clipped_N > unclipped_N).float()


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
