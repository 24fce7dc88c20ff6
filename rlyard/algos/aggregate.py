"""Loss aggregation as per-token weights, so that micro-batches accumulate the exact batch loss.

The batch loss is sum_t w_t * loss_t. Computing w over the whole batch first (rather than a
mean inside each micro-batch) makes gradient accumulation exact, and lets the learner skip
sequences whose loss is identically zero without changing the normaliser.
"""
from __future__ import annotations

from rlyard.algos.advantages import group_indices

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "prompt-mean", "constant")


def token_weights(lengths: list[int], group_ids: list[str], mode: str = "token-mean", constant: float | None = None,
                  episode_ids: list[str] | None = None) -> list[float]:
    """One weight per sequence, applied to each of its sampled tokens.

    lengths: sampled tokens per sequence (L_i). `constant` is Dr. GRPO's normaliser L_max.
    episode_ids: sequences with one id are the segments of one episode (a harness that rewrote its
    history), which the per-sequence modes count as one sequence of their summed length; "" (or
    None for all): a sequence that is an episode of its own.
    """
    live = [i for i, length in enumerate(lengths) if length > 0]
    if not live:
        return [0.0] * len(lengths)
    episode_of = [episode or f"#{i}" for i, episode in enumerate(episode_ids or [""] * len(lengths))]
    episode_tokens: dict[str, int] = {}
    for i in live:
        episode_tokens[episode_of[i]] = episode_tokens.get(episode_of[i], 0) + lengths[i]
    weights = [0.0] * len(lengths)
    if mode == "token-mean":
        total = sum(lengths)
        for i in live:
            weights[i] = 1.0 / total
    elif mode == "seq-mean-token-mean":
        for i in live:
            weights[i] = 1.0 / (episode_tokens[episode_of[i]] * len(episode_tokens))
    elif mode == "seq-mean-token-sum":
        for i in live:
            weights[i] = 1.0 / len(episode_tokens)
    elif mode == "constant":
        if not constant or constant <= 0:
            raise ValueError("loss aggregation 'constant' needs a positive normaliser (the max response length)")
        count = len(set(episode_of))
        for i in live:
            weights[i] = 1.0 / (count * constant)
    elif mode == "prompt-mean":
        groups = [members for members in group_indices(group_ids) if sum(lengths[i] for i in members) > 0]
        for members in groups:
            group_tokens = sum(lengths[i] for i in members)
            for i in members:
                weights[i] = 1.0 / (len(groups) * group_tokens) if lengths[i] else 0.0
    else:
        raise ValueError(f"unknown loss aggregation {mode!r}; allowed: {', '.join(AGGREGATIONS)}")
    return weights
