"""Policy losses (formula sheet §2, and §5's entropy): every per-token surrogate the learner minimises.

All in one module because they are variants of one idea, PPO's clipped surrogate (Schulman et
al., 2017), and are read side by side: dual-clip (Ye et al., 2020) bounds the loss of exploded
ratios, DAPO (Yu et al., 2025) widens the upper clip (`eps_high`, a `ppo_clip` argument), GSPO
(Zheng et al., 2025) clips the sequence ratio, CISPO (MiniMax, 2025) clips the importance weight
instead of the token, decoupled PPO (AReaL, Fu et al., 2025) separates the behaviour policy from
the clipping centre, and TIS (Yao et al., 2025) corrects the mismatch between the inference
engine and the trainer. The entropy bonus is here too: it is a term of the same per-token loss.

Shape suffixes: `_N` one value per sampled token (tokens of all sequences, flattened), `_S` one
value per sequence, `_NV` per token over the vocabulary. Every loss returns (per-token loss to be
minimised, 0/1 float tensor of "clipped" tokens) so the learner aggregates them with its
per-token weights exactly like `ppo_clip`.
"""
from __future__ import annotations

import math

import torch

LOG_RATIO_CLAMP = 20.0  # verl and OpenRLHF clamp log pi/pi_old before exp; so do we
GSPO_LOG_RATIO_MAX = 10.0  # verl clamps log s_i <= 10 before exp
# Decoupled PPO: tokens whose behaviour weight pi_prox / pi_behav exceeds this get no loss. AReaL's
# legacy `behave_imp_weight_cap=5` (today `rejection_sampling: {level: token, action: mask,
# metric: ratio, upper: 5.0}`); without a cap one very stale token can dominate the batch.
DEFAULT_BEHAVIOUR_WEIGHT_CAP = 5.0


def _ratio(logprobs_N: torch.Tensor, old_logprobs_N: torch.Tensor) -> torch.Tensor:
    return torch.exp((logprobs_N - old_logprobs_N).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


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


def dual_clip(
    logprobs_N: torch.Tensor, old_logprobs_N: torch.Tensor, advantages_N: torch.Tensor,
    eps_low: float = 0.2, eps_high: float = 0.2, c: float = 3.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dual-clip PPO (Ye et al., arXiv:1912.09729): for A < 0, loss = min(loss_PPO, -c * A).

    Bounds the loss of a negative-advantage token whose ratio has exploded (rho > c); for A >= 0
    it is plain PPO clip. A token on the -c*A branch is constant in log pi: marked clipped.
    """
    if c <= 1.0:
        raise ValueError(f"dual-clip constant c must be > 1, got {c}")
    ppo_loss_N, ppo_clipped_N = ppo_clip(logprobs_N, old_logprobs_N, advantages_N, eps_low, eps_high)
    floor_N = -c * advantages_N
    dual_N = (advantages_N < 0) & (floor_N < ppo_loss_N)
    loss_N = torch.where(dual_N, floor_N, ppo_loss_N)
    return loss_N, torch.where(dual_N, torch.ones_like(ppo_clipped_N), ppo_clipped_N)


def sequence_sum(values_N: torch.Tensor, seq_index_N: torch.Tensor) -> torch.Tensor:
    """Sum of each sequence's tokens: seq_index_N holds sequence numbers 0..S-1, one per token."""
    num_seqs = int(seq_index_N.max().item()) + 1 if seq_index_N.numel() else 0
    sums_S = torch.zeros(num_seqs, dtype=values_N.dtype, device=values_N.device)
    return sums_S.index_add(0, seq_index_N, values_N)


def sequence_mean(values_N: torch.Tensor, seq_index_N: torch.Tensor) -> torch.Tensor:
    """Mean of each sequence's tokens (see `sequence_sum`)."""
    sums_S = sequence_sum(values_N, seq_index_N)
    counts_S = torch.bincount(seq_index_N, minlength=sums_S.shape[0]).clamp(min=1).to(values_N.dtype)
    return sums_S / counts_S


def gspo(
    logprobs_N: torch.Tensor, old_logprobs_N: torch.Tensor, advantages_N: torch.Tensor, seq_index_N: torch.Tensor,
    eps_low: float = 3e-4, eps_high: float = 4e-4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO (Zheng et al., arXiv:2507.18071): PPO clip on the sequence ratio s_i = exp(mean_t Delta_t).

    GSPO-token form: s_{i,t} = sg(s_i) * exp(log pi_t - sg(log pi_t)), whose value is s_i and
    whose gradient flows through each token; loss_t = max(-A s_{i,t}, -A clip(s_{i,t}, 1-eps_l,
    1+eps_h)), i.e. the sequence loss broadcast to its tokens. Aggregate with seq-mean-token-mean
    to recover the paper's gradient (verl forces it). Paper clip range 3e-4 / 4e-4.
    """
    delta_N = (logprobs_N - old_logprobs_N).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    log_seq_ratio_S = sequence_mean(delta_N.detach(), seq_index_N)
    log_ratio_N = log_seq_ratio_S[seq_index_N] + logprobs_N - logprobs_N.detach()
    ratio_N = torch.exp(log_ratio_N.clamp(max=GSPO_LOG_RATIO_MAX))
    unclipped_N = -advantages_N * ratio_N
    clipped_N = -advantages_N * ratio_N.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss_N = torch.maximum(unclipped_N, clipped_N)
    return loss_N, (clipped_N > unclipped_N).float()


def cispo(
    logprobs_N: torch.Tensor, old_logprobs_N: torch.Tensor, advantages_N: torch.Tensor, eps_low: float, eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO (MiniMax-M1, arXiv:2506.13585): loss_t = -sg(clip(rho_t, 1-eps_low, 1+eps_high)) * A_t * log pi_t.

    The IS weight is clipped instead of the token, so every token keeps a gradient of -r_hat * A.
    The paper sets no lower bound (pass eps_low >= 1) and does not disclose its eps_high.
    "Clipped" marks tokens whose weight was truncated (they still carry gradient).
    """
    ratio_N = _ratio(logprobs_N, old_logprobs_N).detach()
    weight_N = ratio_N.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss_N = -weight_N * advantages_N * logprobs_N
    return loss_N, (weight_N != ratio_N).float()


def tis_weights(old_logprobs_N: torch.Tensor, rollout_logprobs_N: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """Token-level truncated importance sampling (Yao et al. 2025, fengyao.notion.site/off-policy-rl).

    w_t = min(pi_old(y_t) / pi_rollout(y_t), C), detached: pi_old is the trainer's recomputed
    log-prob, pi_rollout the inference engine's. Multiply the per-token policy loss by w_t.
    """
    log_ratio_N = (old_logprobs_N - rollout_logprobs_N).detach()
    return torch.exp(log_ratio_N.clamp(max=math.log(cap)))


def tis_weights_sequence(
    old_logprobs_N: torch.Tensor, rollout_logprobs_N: torch.Tensor, seq_index_N: torch.Tensor, cap: float = 2.0,
) -> torch.Tensor:
    """Sequence-level TIS (verl `rollout_is=sequence`): w_i = min(exp(sum_t Delta_t), C) on every token of i."""
    log_ratio_S = sequence_sum((old_logprobs_N - rollout_logprobs_N).detach(), seq_index_N)
    return torch.exp(log_ratio_S.clamp(max=math.log(cap)))[seq_index_N]


def decoupled_ppo(
    logprobs_N: torch.Tensor, proximal_logprobs_N: torch.Tensor, behaviour_logprobs_N: torch.Tensor,
    advantages_N: torch.Tensor, eps_low: float = 0.2, eps_high: float = 0.2,
    weight_cap: float | None = DEFAULT_BEHAVIOUR_WEIGHT_CAP,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoupled PPO (AReaL, Fu et al., arXiv:2505.24298; Hilton et al., arXiv:2110.00641).

    loss_t = sg(pi_prox / pi_behav) * max(-A u_t, -A clip(u_t, 1-eps_low, 1+eps_high)), u_t = pi_theta / pi_prox.
    pi_behav generated the tokens (possibly stale), pi_prox is the trainer's frozen recompute
    (the clipping centre). weight_cap (default 5, AReaL's legacy behave_imp_weight_cap) masks
    (zeroes) tokens whose weight exceeds it; masked tokens are marked clipped (they carry no
    gradient). weight_cap=None applies no cap.
    """
    weight_N = _ratio(proximal_logprobs_N, behaviour_logprobs_N).detach()
    ppo_loss_N, clipped_N = ppo_clip(logprobs_N, proximal_logprobs_N, advantages_N, eps_low, eps_high)
    if weight_cap is not None:
        over_N = weight_N > weight_cap
        weight_N = torch.where(over_N, torch.zeros_like(weight_N), weight_N)
        clipped_N = torch.where(over_N, torch.ones_like(clipped_N), clipped_N)
    return weight_N * ppo_loss_N, clipped_N


def entropy_from_logits(logits_NV: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per-token entropy H = logsumexp(z) - sum_v softmax(z)_v z_v = -sum_v p_v log p_v, z = logits / T.

    The entropy bonus is loss = pg_loss - c_H * agg(H) (no single paper; verl/OpenRLHF/TRL
    `entropy_coeff`). Uses the sampling temperature so that H is the sampler's entropy.
    """
    z_NV = logits_NV.float() / temperature
    return torch.logsumexp(z_NV, dim=-1) - (torch.softmax(z_NV, dim=-1) * z_NV).sum(dim=-1)
