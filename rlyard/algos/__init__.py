"""Algorithms as small pure functions of tensors (imports torch only), one module per part of the
formula sheet (docs/algorithms.md has the formulas as rlyard implements them):

- `advantages`: §1, every advantage / return estimator (GAE, GRPO, Dr. GRPO, RLOO, REINFORCE++, ReMax);
- `policy_losses`: §2 and §5, every policy loss (PPO clip, dual-clip, GSPO, CISPO, decoupled PPO,
  TIS weights) and the entropy;
- `aggregate`: §3, loss aggregation as per-token weights;
- `kl`: §4, the KL estimators and KL as a per-token reward penalty;
- `filters`: §6, DAPO's dynamic sampling and length handling;
- `value`: §7, the critic's clipped value loss.
"""
from rlyard.algos.advantages import grpo, group_indices
from rlyard.algos.aggregate import AGGREGATIONS, token_weights
from rlyard.algos.kl import kl_estimate
from rlyard.algos.policy_losses import ppo_clip

__all__ = ["grpo", "group_indices", "AGGREGATIONS", "token_weights", "kl_estimate", "ppo_clip"]
