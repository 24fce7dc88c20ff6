"""The learner's logits: chunked over the tokens, entropy without gradients when it is not in the loss (issue 37, item 7).

The full fp32 logits of a micro-batch were materialised at once and kept for the backward, and the
entropy was built with gradients even with algo.entropy_coef = 0. Numbers must equal the
unchunked computation; what the backward keeps is measured (bytes saved for backward through
`torch.autograd.graph.saved_tensors_hooks`), never timed.
"""
from __future__ import annotations

import pytest
import torch

from rlyard.train.logprobs import backbone_and_head, continuation_logprobs, unshared_continuation_logprobs

PREFIX = [1, 17, 230, 4400, 9]
CONTINUATIONS = [[300 + k for k in range(12)], [900 + k for k in range(7)], [20 + k for k in range(10)]]
MASKS = [[1] * 12, [1, 1, 0, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]]
TEMPERATURES = [None, [0.7] * 7, [1.3] * 10]


@pytest.fixture(scope="module")
def model(tokenizer):
    from conftest import make_tiny_llama

    return make_tiny_llama(len(tokenizer))


def reference(model, prefix, continuations, masks, temperature, token_temperatures):
    """The unchunked computation: one forward, full fp32 log-softmax over every position."""
    body, head = backbone_and_head(model)
    out_lp, out_ent = [], []
    for row, (tokens, mask) in enumerate(zip(continuations, masks)):
        ids = torch.tensor([prefix + tokens])
        hidden = body(input_ids=ids).last_hidden_state[0, len(prefix) - 1 : -1]
        temps = torch.tensor(token_temperatures[row] if token_temperatures and token_temperatures[row] else [temperature] * len(tokens))
        log_probs = torch.log_softmax(head(hidden).float() / temps[:, None], dim=-1)
        keep = torch.tensor(mask, dtype=torch.bool)
        lp = log_probs.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)[keep]
        out_lp.append(lp)
        out_ent.append(-(log_probs.exp() * log_probs).sum(-1)[keep])
    return out_lp, out_ent


@pytest.mark.parametrize("layout", [continuation_logprobs, unshared_continuation_logprobs], ids=["shared", "unshared"])
def test_chunked_logprobs_and_entropies_equal_the_unchunked_ones(model, layout):
    """Chunks of 1 and 5 tokens against one chunk of all (the former computation) to 1e-6 (relative:
    the head's matmul over another batch shape rounds otherwise, a few float32 ulps of values near 11), and
    all of them against a plain full forward (another kernel path: to float32 rounding)."""
    with torch.no_grad():
        want_lp, want_ent = reference(model, PREFIX, CONTINUATIONS, MASKS, 0.9, TEMPERATURES)
        runs = {chunk: layout(model, PREFIX, CONTINUATIONS, MASKS, 0.9, token_temperatures=TEMPERATURES, chunk_tokens=chunk)
                for chunk in (1, 5, 10_000, None)}
    whole = runs[10_000]
    for chunk, out in runs.items():
        for got, want in zip(out.logprobs + out.entropies, whole.logprobs + whole.entropies):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6, msg=f"chunk {chunk}")
        for got, want in zip(out.logprobs + out.entropies, want_lp + want_ent):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)


def gradients(model, chunk, entropy_coef=0.0):
    model.zero_grad(set_to_none=True)
    out = continuation_logprobs(model, PREFIX, CONTINUATIONS, MASKS, 0.9, token_temperatures=TEMPERATURES,
                                entropy_grad=entropy_coef != 0, chunk_tokens=chunk)
    loss = sum((lp * (k + 1)).sum() for k, lp in enumerate(out.logprobs))
    if entropy_coef:
        loss = loss - entropy_coef * sum(e.sum() for e in out.entropies)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("entropy_coef", [0.0, 0.01])
def test_chunked_gradients_equal_the_whole_batch_ones(model, entropy_coef):
    whole = gradients(model, chunk=10_000, entropy_coef=entropy_coef)
    chunked = gradients(model, chunk=3, entropy_coef=entropy_coef)
    assert whole.keys() == chunked.keys() and whole
    for name in whole:  # sums over the chunks in another order: equal to float32 rounding of the whole tensor
        gap = ((chunked[name] - whole[name]).norm() / whole[name].norm()).item()
        assert gap < 1e-5, (name, gap)


def test_entropy_has_no_graph_unless_it_is_in_the_loss(model):
    metric = continuation_logprobs(model, PREFIX, CONTINUATIONS, MASKS, 1.0)
    assert all(lp.requires_grad for lp in metric.logprobs)
    assert not any(e.requires_grad for e in metric.entropies)
    trained = continuation_logprobs(model, PREFIX, CONTINUATIONS, MASKS, 1.0, entropy_grad=True)
    assert all(e.requires_grad for e in trained.entropies)


def saved_bytes(fn) -> int:
    """Bytes the autograd graph saves for the backward while `fn` runs (float tensors only)."""
    total = 0

    def pack(tensor):
        nonlocal total
        if tensor.is_floating_point():
            total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def test_the_backward_keeps_no_full_logits(model, tokenizer):
    """The saved tensors of the scoring step: less than one (N, V) fp32 logits tensor, where the
    unchunked path kept several (the logits, the log-softmax, the entropy's products)."""
    sampled = sum(sum(m) for m in MASKS)
    full_logits = sampled * len(tokenizer) * 4
    _, head = backbone_and_head(model)
    body, _ = backbone_and_head(model)
    with torch.no_grad():
        hidden = body(input_ids=torch.tensor([PREFIX + CONTINUATIONS[0]])).last_hidden_state
    hidden = hidden.detach().expand(len(CONTINUATIONS), -1, -1).clone().requires_grad_()
    from rlyard.train.logprobs import score_hidden

    chunked = saved_bytes(lambda: score_hidden(hidden, head, CONTINUATIONS, MASKS, 1.0, True, False, None, chunk_tokens=4))

    def unchunked():
        selected = hidden[0, :sampled]
        log_probs = torch.log_softmax(head(selected).float(), dim=-1)
        return -(log_probs.exp() * log_probs).sum(-1)

    assert saved_bytes(unchunked) >= full_logits
    assert chunked < full_logits / 4, (chunked, full_logits)
    print(f"saved for backward: {chunked} bytes chunked; one full fp32 logits tensor {full_logits}")
