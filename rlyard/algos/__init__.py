"""Algorithms as small pure functions of tensors (imports torch only)."""
from rlyard.algos.advantages import grpo, group_indices
from rlyard.algos.aggregate import AGGREGATIONS, token_weights
from rlyard.algos.losses import kl_estimate, ppo_clip

__all__ = ["grpo", "group_indices", "AGGREGATIONS", "token_weights", "kl_estimate", "ppo_clip"]
