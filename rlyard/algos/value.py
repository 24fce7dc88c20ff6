"""The critic's loss (formula sheet §7), used only with the GAE advantage (`advantage: gae`).

Apart from the policy losses because it trains a different model (the value head) with its own
optimiser, and because no paper defines it: PPO (Schulman et al., 2017) only names a squared
error; the clipped form is the OpenAI-baselines convention that verl and OpenRLHF copy.

Shape suffix `_N`: one value per sampled token (tokens of all sequences, flattened).
"""
from __future__ import annotations

import torch


def value_loss(
    values_N: torch.Tensor, old_values_N: torch.Tensor, returns_N: torch.Tensor, clip_eps: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped PPO value loss: 0.5 * max((V - Ret)^2, (V_clip - Ret)^2), V_clip = V_old + clip(V - V_old, +-eps).

    Not in the PPO paper (arXiv:1707.06347): the OpenAI-baselines convention that verl and
    OpenRLHF copy. Ret is the unwhitened GAE return. Returns the per-token loss and a 0/1 tensor
    of tokens where the clipped branch won (no gradient flows through them).
    """
    clipped_values_N = old_values_N + (values_N - old_values_N).clamp(-clip_eps, clip_eps)
    unclipped_sq_N = (values_N - returns_N) ** 2
    clipped_sq_N = (clipped_values_N - returns_N) ** 2
    loss_N = 0.5 * torch.maximum(unclipped_sq_N, clipped_sq_N)
    return loss_N, (clipped_sq_N > unclipped_sq_N).float()
