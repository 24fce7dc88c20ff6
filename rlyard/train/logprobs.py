"""Per-token logprobs of sampled tokens, with the prompt computed once per group.

The n completions of one prompt share its tokens, so the prompt goes through the model once
and its KV cache is repeated for the n continuations. Autograd flows through the repeat (the
prompt's gradient is the sum over its completions), so this is exact, not an approximation;
on a CPU it removes most of the training compute for short answers to long prompts.
Logits are computed only where a sampled token is predicted: the LM head of a 49k vocabulary
costs as much as several layers. They are computed a chunk of tokens at a time (`score_hidden`),
so the full fp32 logits of a micro-batch never exist at once, and with gradients each chunk is
recomputed in the backward rather than kept: what the backward holds is the hidden states.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

# fp32 logits alive at once (2**25 floats = 128 MiB): a chunk is this many over the vocabulary's size tokens
LOGITS_PER_CHUNK = 2**25


@dataclass
class GroupLogprobs:
    logprobs: list[torch.Tensor]  # per continuation: (L_i,) logprob of each sampled token
    entropies: list[torch.Tensor]  # per continuation: (L_i,) entropy of the predicting distribution
    hidden: list[torch.Tensor] | None = None  # per continuation: (L_i, H) last hidden state predicting each token (critic)


def backbone_and_head(model):
    """The transformer body and the LM head, through a peft wrapper if there is one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model, base.lm_head


def continuation_logprobs(
    model, prefix: list[int], continuations: list[list[int]], masks: list[list[int]],
    temperature: float = 1.0, with_entropy: bool = True, with_hidden: bool = False,
    token_temperatures: list[list[float] | None] | None = None, entropy_grad: bool = False, chunk_tokens: int | None = None,
) -> GroupLogprobs:
    """Logprobs of the masked (sampled) tokens of each continuation of one shared prefix.

    prefix: the tokens every continuation starts from (at least one token).
    continuations / masks: the tokens after the prefix and their loss_mask (1 = sampled).
    token_temperatures: per continuation, None (all its tokens at `temperature`) or one temperature
    per token (a harness that sampled its turns at different temperatures).
    with_hidden: also return the last hidden state that predicts each sampled token (the critic reads it).
    entropy_grad: the entropies carry gradients (an entropy term in the loss); by default they are
    computed without, as a metric. chunk_tokens: tokens per logits chunk (default: LOGITS_PER_CHUNK's).
    """
    if not prefix:
        raise ValueError("a prefix needs at least one token (the first token is never predicted)")
    body, head = backbone_and_head(model)
    device = head.weight.device
    group = len(continuations)
    width = max(len(c) for c in continuations)
    prefix_out = body(input_ids=torch.tensor([prefix], device=device), use_cache=True)
    prefix_last = prefix_out.last_hidden_state[:, -1]  # predicts each continuation's first token

    if width > 1:
        cache = prefix_out.cache
        cache.batch_repeat_interleave(group)
        ids = torch.zeros((group, width), dtype=torch.long)
        for row, tokens in enumerate(continuations):
            ids[row, : len(tokens)] = torch.tensor(tokens)
        positions = torch.arange(len(prefix), len(prefix) + width - 1).expand(group, -1)
        # Right padding needs no attention mask: causal attention never looks at later pads.
        cont_out = body(input_ids=ids[:, :-1].to(device), position_ids=positions.to(device), cache=cache, use_cache=True)
        hidden = torch.cat([prefix_last.expand(group, -1)[:, None], cont_out.last_hidden_state], dim=1)
    else:
        hidden = prefix_last.expand(group, -1)[:, None]

    return score_hidden(hidden, head, continuations, masks, temperature, with_entropy, with_hidden, token_temperatures,
                        entropy_grad, chunk_tokens)


def unshared_continuation_logprobs(
    model, prefix: list[int], continuations: list[list[int]], masks: list[list[int]],
    temperature: float = 1.0, with_entropy: bool = True, with_hidden: bool = False,
    token_temperatures: list[list[float] | None] | None = None, entropy_grad: bool = False, chunk_tokens: int | None = None,
) -> GroupLogprobs:
    """`continuation_logprobs` without the shared prompt's KV cache, for a checkpointed model.

    A checkpointed layer drops its cache (transformers sets cache=None: the backward's replay
    would write it twice), so continuations could not attend to a prompt that ran once. Each row
    is prompt + continuation in one right-padded forward instead: the prompt's compute is paid
    per continuation, the price of keeping only each layer's input for the backward.
    """
    body, head = backbone_and_head(model)
    device, start = head.weight.device, len(prefix) - 1
    ids = torch.zeros((len(continuations), start + max(len(c) for c in continuations)), dtype=torch.long)
    for row, tokens in enumerate(continuations):
        ids[row, : start + len(tokens)] = torch.tensor((prefix + tokens)[:-1])  # the last token predicts nothing
    hidden = body(input_ids=ids.to(device), use_cache=False).last_hidden_state[:, start:]  # column c predicts token c
    return score_hidden(hidden, head, continuations, masks, temperature, with_entropy, with_hidden, token_temperatures,
                        entropy_grad, chunk_tokens)


def score_hidden(hidden, head, continuations: list[list[int]], masks: list[list[int]], temperature: float,
                 with_entropy: bool, with_hidden: bool, token_temperatures: list[list[float] | None] | None,
                 entropy_grad: bool = False, chunk_tokens: int | None = None) -> GroupLogprobs:
    """Logprobs (and entropies) of the masked tokens, from the hidden states that predict them
    (`hidden[row, col]` predicts `continuations[row][col]`): what both forward layouts share.

    A chunk of tokens at a time: each chunk's fp32 logits live only while it is scored, and with
    gradients the chunk is recomputed in the backward (activation checkpointing of the head), so
    the backward keeps the (N, H) hidden states instead of (N, V) log-probabilities."""
    device = head.weight.device
    rows, cols, targets, temperatures = [], [], [], []
    for row, (tokens, mask) in enumerate(zip(continuations, masks)):
        own = token_temperatures[row] if token_temperatures else None
        for col, (token, keep) in enumerate(zip(tokens, mask)):
            if keep:
                rows.append(row), cols.append(col), targets.append(token)
                temperatures.append(own[col] if own is not None else temperature)
    selected = hidden[torch.tensor(rows), torch.tensor(cols)]  # (N, H)
    target_N = torch.tensor(targets, device=device)
    temperature_N = torch.tensor(temperatures, device=device)
    size = chunk_tokens or max(1, LOGITS_PER_CHUNK // head.weight.shape[0])
    recompute = torch.is_grad_enabled() and selected.requires_grad
    logprobs_N, entropies_N = [], []
    for start in range(0, max(len(targets), 1), size):
        part = (selected[start : start + size], target_N[start : start + size], temperature_N[start : start + size])
        if recompute:
            logprob_C, entropy_C = checkpoint(_score_chunk, head, *part, with_entropy, entropy_grad, use_reentrant=False)
        else:
            logprob_C, entropy_C = _score_chunk(head, *part, with_entropy, entropy_grad)
        logprobs_N.append(logprob_C), entropies_N.append(entropy_C)
    token_logprobs, token_entropy = torch.cat(logprobs_N), torch.cat(entropies_N)
    counts = [sum(mask) for mask in masks]
    hidden_states = list(selected.split(counts)) if with_hidden else None
    return GroupLogprobs(list(token_logprobs.split(counts)), list(token_entropy.split(counts)), hidden_states)


def _score_chunk(head, hidden_C, target_C, temperature_C, with_entropy: bool, entropy_grad: bool):
    """(C,) logprobs of the targets and entropies of the predicting distributions; the entropy
    without gradients unless `entropy_grad` (it is then only a metric: no graph kept for it)."""
    logits = head(hidden_C).float() / temperature_C[:, None]
    log_probs = torch.log_softmax(logits, dim=-1)
    logprob_C = log_probs.gather(-1, target_C[:, None]).squeeze(-1)
    if not with_entropy:
        return logprob_C, torch.zeros_like(logprob_C).detach()
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy_C = -(log_probs.exp() * log_probs).sum(-1)
    return logprob_C, entropy_C
