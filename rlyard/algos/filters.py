"""DAPO sampling and length handling (Yu et al., arXiv:2503.14476, §3.2-3.4): which samples train.

Plain functions over per-sequence values; they return Python lists (one entry per sequence)
because the orchestrator uses them to drop or re-weight samples before any tensor is built.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlyard.algos.advantages import group_indices


def dynamic_sampling_keep(accuracies_B: torch.Tensor | Sequence[float], group_ids: list[str]) -> list[bool]:
    """DAPO dynamic sampling: keep a group only if its accuracies are not all equal (0 < #correct < G).

    Pass the verifier's accuracy (its reward before any shaping such as the soft overlong
    penalty), as DAPO and verl-recipe (`filter_groups.metric=acc`) do: a group that is all right
    or all wrong has no correctness signal, even when length penalties make its rewards differ;
    one whose penalised rewards happen to be equal still has one. A group of one is kept
    (verl-recipe: std > 0 or size 1). One bool per sequence.
    """
    accuracies = accuracies_B.tolist() if isinstance(accuracies_B, torch.Tensor) else list(accuracies_B)
    keep = [False] * len(accuracies)
    for members in group_indices(group_ids):
        values = {accuracies[i] for i in members}
        if len(members) == 1 or len(values) > 1:
            for i in members:
                keep[i] = True
    return keep


# Finish reasons of a truncated sample. Single-turn: the engine's "length" (cut at
# rollout.max_new_tokens). Multi-turn (rlyard/agent/loop.py): "token_budget" (the episode ran out
# of agent.max_total_tokens) and "turn_token_limit" (a reply cut at agent.max_tokens_per_turn).
# "turn_limit" (agent.max_turns) is not a truncation: every reply of the episode was finished.
TRUNCATED_FINISH_REASONS = frozenset({"length", "token_budget", "turn_token_limit"})


def is_truncated(finish_reason: str) -> bool:
    """Did the sample end because it hit a length limit (see TRUNCATED_FINISH_REASONS)?"""
    return finish_reason in TRUNCATED_FINISH_REASONS


def overlong_mask(finish_reasons: Sequence[str]) -> list[float]:
    """DAPO overlong filtering: 0.0 for truncated samples (`is_truncated`), else 1.0.

    A truncated answer is not necessarily wrong; masking its loss avoids punishing reasoning
    that merely ran out of budget. Multiply each sequence's token weights by this value.
    """
    return [0.0 if is_truncated(reason) else 1.0 for reason in finish_reasons]


def soft_overlong_penalty(lengths: Sequence[int], max_len: int, cache_len: int) -> list[float]:
    """DAPO soft overlong punishment (Eq. 13), added to the correctness reward.

    R_len = 0 if |y| <= L_max - L_cache; ((L_max - L_cache) - |y|) / L_cache inside the cache
    window; -1 if |y| > L_max. Paper: L_max = 20480, L_cache = 4096. |y| counts sampled tokens
    only: a single-turn reply, or all replies of a multi-turn episode (never its tool output).
    """
    if cache_len <= 0 or cache_len > max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    soft_start = max_len - cache_len
    penalties = []
    for length in lengths:
        if length <= soft_start:
            penalties.append(0.0)
        elif length <= max_len:
            penalties.append((soft_start - length) / cache_len)
        else:
            penalties.append(-1.0)
    return penalties
