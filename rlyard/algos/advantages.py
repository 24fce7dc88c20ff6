"""Advantage estimators: pure functions from rewards (and groups) to per-sequence advantages.

Shape suffixes: `_B` one value per sequence in the batch.
"""
from __future__ import annotations

import torch


def group_indices(group_ids: list[str]) -> list[list[int]]:
    """Positions of each group's members, groups in first-seen order."""
    groups: dict[str, list[int]] = {}
    for index, gid in enumerate(group_ids):
        groups.setdefault(gid, []).append(index)
    return list(groups.values())


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
