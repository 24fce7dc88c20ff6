"""The algorithm zoo (estimators, policy losses, filters) against the papers' formulas: GAE
(arXiv:1506.02438), RLOO (arXiv:2402.14740), Dr. GRPO (arXiv:2503.20783), REINFORCE++
(arXiv:2501.03262), ReMax (arXiv:2310.10505), dual-clip (arXiv:1912.09729), DAPO
(arXiv:2503.14476), GSPO (arXiv:2507.18071), CISPO (arXiv:2506.13585), TIS (Yao et al. 2025,
fengyao.notion.site/off-policy-rl), AReaL decoupled PPO (arXiv:2505.24298); see docs/algorithms.md.

Every expected value is worked out here from the formula with plain `math` / `statistics` (or
quoted from the formula sheet's worked numbers), never by calling the function under test twice.
"""
from __future__ import annotations

import ast
import math
import statistics
from pathlib import Path

import pytest
import torch

from rlyard.algos import advantages, filters, policy_losses
from rlyard.algos.advantages import (
    discounted_returns, dr_grpo, gae, reinforce_pp, reinforce_pp_baseline, remax, rloo, whiten,
)
from rlyard.algos.filters import dynamic_sampling_keep, overlong_mask, soft_overlong_penalty
from rlyard.algos.kl import kl_token_rewards
from rlyard.algos.policy_losses import (
    cispo, decoupled_ppo, dual_clip, entropy_from_logits, gspo, ppo_clip, tis_weights, tis_weights_sequence,
)
from rlyard.algos.value import value_loss


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def verl_whiten(xs: list[float]) -> list[float]:
    mean, var = statistics.fmean(xs), statistics.variance(xs)  # variance: unbiased (n-1)
    return [(x - mean) / math.sqrt(var + 1e-8) for x in xs]


def openrlhf_whiten(xs: list[float]) -> list[float]:
    mean, var = statistics.fmean(xs), statistics.pvariance(xs)  # population
    return [(x - mean) / math.sqrt(max(var, 1e-8)) for x in xs]


# --------------------------------------------------------------------------- §1.1 GAE + whitening
# r = [0, 0, 1], V = [0.5, 0.6, 0.7], gamma = 1, lambda = 0.95
# delta = [0 + 0.6 - 0.5, 0 + 0.7 - 0.6, 1 - 0.7] = [0.1, 0.1, 0.3]
A2 = 0.3
A1 = 0.1 + 0.95 * A2  # 0.385
A0 = 0.1 + 0.95 * A1  # 0.46575
GAE_A = [A0, A1, A2]


def test_gae_formula_sheet_example():
    assert GAE_A == pytest.approx([0.46575, 0.385, 0.3], abs=1e-9)
    adv, ret = gae(t([[0, 0, 1]]), t([[0.5, 0.6, 0.7]]), t([[1, 1, 1]]), gamma=1.0, lam=0.95)
    assert adv[0].tolist() == pytest.approx(GAE_A, abs=1e-6)
    assert ret[0].tolist() == pytest.approx([A0 + 0.5, A1 + 0.6, A2 + 0.7], abs=1e-6)
    assert ret[0].tolist() == pytest.approx([0.96575, 0.985, 1.0], abs=1e-6)
    # verl whitening of A (not Ret), this sequence being the batch
    assert verl_whiten(GAE_A) == pytest.approx([0.991344, 0.017092, -1.008436], abs=1e-6)
    assert whiten(adv, t([[1, 1, 1]]))[0].tolist() == pytest.approx([0.991344, 0.017092, -1.008436], abs=1e-5)


def test_gae_with_kl_token_rewards():
    # beta = 0.1, kl = [0.1, 0.2, 0.3] -> r = [-0.01, -0.02, 1 - 0.03]
    mask = t([[1, 1, 1]])
    rewards = kl_token_rewards(t([1.0]), t([[0.1, 0.2, 0.3]]), mask, beta=0.1)
    assert rewards[0].tolist() == pytest.approx([-0.01, -0.02, 0.97], abs=1e-7)
    a2 = 0.97 - 0.7
    a1 = (-0.02 + 0.7 - 0.6) + 0.95 * a2
    a0 = (-0.01 + 0.6 - 0.5) + 0.95 * a1
    assert [a0, a1, a2] == pytest.approx([0.409675, 0.3365, 0.27], abs=1e-9)
    adv, _ = gae(rewards, t([[0.5, 0.6, 0.7]]), mask, gamma=1.0, lam=0.95)
    assert adv[0].tolist() == pytest.approx([a0, a1, a2], abs=1e-6)


def test_gae_skips_masked_observation_tokens():
    # multi-turn: position 1 is an observation (m = 0); its reward and value must be invisible
    mask = t([[1, 0, 1, 1]])
    rewards, values = t([[0, 5.0, 0, 1]]), t([[0.5, 9.0, 0.6, 0.7]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.95)
    assert adv[0].tolist() == pytest.approx([A0, 0.0, A1, A2], abs=1e-6)
    assert ret[0].tolist() == pytest.approx([0.96575, 0.0, 0.985, 1.0], abs=1e-6)
    # gamma = 0.9: the discount counts valid steps only (V_{t+1} of position 0 is V at position 2)
    g, lam = 0.9, 0.95
    b2 = 1 - 0.7
    b1 = (g * 0.7 - 0.6) + g * lam * b2
    b0 = (g * 0.6 - 0.5) + g * lam * b1
    adv, _ = gae(rewards, values, mask, gamma=g, lam=lam)
    assert adv[0].tolist() == pytest.approx([b0, 0.0, b1, b2], abs=1e-6)


def test_gae_unequal_lengths_and_batch_whitening():
    # row 2 has one valid token: A = 1 - 0.4 = 0.6 (V past the end = 0), Ret = 1.0; padding ignored
    mask = t([[1, 1, 1], [1, 0, 0]])
    adv, ret = gae(t([[0, 0, 1], [1, 0, 0]]), t([[0.5, 0.6, 0.7], [0.4, 3.0, 3.0]]), mask, gamma=1.0, lam=0.95)
    assert adv.flatten().tolist() == pytest.approx(GAE_A + [0.6, 0.0, 0.0], abs=1e-6)
    assert ret[1].tolist() == pytest.approx([1.0, 0.0, 0.0], abs=1e-6)
    valid = GAE_A + [0.6]
    for unbiased, ref in ((True, verl_whiten), (False, openrlhf_whiten)):
        w = ref(valid)
        got = whiten(adv, mask, unbiased=unbiased)
        assert got.flatten().tolist() == pytest.approx(w[:3] + [w[3], 0.0, 0.0], abs=1e-5)


def test_whiten_degenerate_cases():
    # one valid token or constant values: x - mu = 0 everywhere -> 0, never nan
    assert whiten(t([[3.0, 7.0]]), t([[1, 0]])).tolist() == [[0.0, 0.0]]
    assert whiten(t([[2.0, 2.0]]), t([[1, 1]]), unbiased=False).tolist() == [[0.0, 0.0]]
    assert whiten(t([[2.0, 2.0]]), t([[0, 0]])).tolist() == [[0.0, 0.0]]


# --------------------------------------------------------------------------- §1.3/1.4 Dr. GRPO, RLOO
def test_dr_grpo_alias():
    assert dr_grpo(t([1, 0, 0, 1]), ["g"] * 4).tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5], abs=1e-7)


def test_rloo_leave_one_out():
    rewards = [1.0, 0.0, 0.0, 1.0]
    expected = [r - (sum(rewards) - r) / 3 for r in rewards]  # mean of the other three
    assert expected == pytest.approx([0.666667, -0.666667, -0.666667, 0.666667], abs=1e-6)
    assert rloo(t(rewards), ["g"] * 4).tolist() == pytest.approx(expected, abs=1e-6)
    # interleaved groups and a group of one (no other sample: 0)
    got = rloo(t([1.0, 3.0, 0.0, 1.0, 0.5]), ["a", "b", "a", "b", "solo"])
    assert got.tolist() == pytest.approx([1.0 - 0.0, 3.0 - 1.0, 0.0 - 1.0, 1.0 - 3.0, 0.0], abs=1e-6)


# --------------------------------------------------------------------------- §1.5 REINFORCE++
def test_reinforce_pp_formula_sheet_example():
    # beta = 0.1; seq 1: R = 1, kl = [0.2, 0.1]; seq 2: R = 0, kl = [0, -0.1]; column 3 is padding
    kl, mask = t([[0.2, 0.1, 7.0], [0.0, -0.1, 7.0]]), t([[1, 1, 0], [1, 1, 0]])
    rewards = kl_token_rewards(t([1.0, 0.0]), kl, mask, beta=0.1)
    assert rewards.flatten().tolist() == pytest.approx([-0.02, 1 - 0.01, 0.0, 0.0, 0.01, 0.0], abs=1e-7)
    returns = [-0.02 + 0.99, 0.99, 0.0 + 0.01, 0.01]  # gamma = 1
    got = discounted_returns(rewards, mask).flatten().tolist()
    assert got == pytest.approx(returns[:2] + [0.0] + returns[2:] + [0.0], abs=1e-6)
    assert statistics.fmean(returns) == pytest.approx(0.495)
    verl = verl_whiten(returns)
    assert verl == pytest.approx([0.848079, 0.883788, -0.865933, -0.865933], abs=1e-6)
    got = reinforce_pp(t([1.0, 0.0]), kl, mask, beta=0.1)
    assert got.flatten().tolist() == pytest.approx(verl[:2] + [0.0] + verl[2:] + [0.0], abs=1e-5)
    orlhf = openrlhf_whiten(returns)
    assert orlhf == pytest.approx([0.979277, 1.020510, -0.999894, -0.999894], abs=1e-6)
    got = reinforce_pp(t([1.0, 0.0]), kl, mask, beta=0.1, unbiased=False)
    assert got.flatten().tolist() == pytest.approx(orlhf[:2] + [0.0] + orlhf[2:] + [0.0], abs=1e-5)


def test_discounted_returns_gamma_and_masked_middle():
    # gamma = 0.5, mask [1, 0, 1]: the observation token neither adds reward nor costs a discount step
    got = discounted_returns(t([[-0.02, 4.0, 0.99]]), t([[1, 0, 1]]), gamma=0.5)
    assert got[0].tolist() == pytest.approx([-0.02 + 0.5 * 0.99, 0.0, 0.99], abs=1e-6)
    # the outcome reward lands on the last *valid* token, not the last column
    rewards = kl_token_rewards(t([1.0, 2.0]), torch.zeros(2, 4), t([[1, 0, 1, 0], [1, 1, 1, 1]]), beta=0.1)
    assert rewards.tolist() == [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 2.0]]


# --------------------------------------------------------------------------- §1.6 REINFORCE++-baseline
def test_reinforce_pp_baseline_token_weighted():
    # R = [1, 0, 0, 1], lengths [3, 1, 1, 1] -> tokens [.5, .5, .5, -.5, -.5, .5], token mean 1/6
    mask = t([[1, 1, 1], [1, 0, 0], [1, 0, 0], [1, 0, 0]])
    tokens = [0.5, 0.5, 0.5, -0.5, -0.5, 0.5]
    assert statistics.fmean(tokens) == pytest.approx(1 / 6)
    cases = ((True, verl_whiten, 0.645497, -1.290994), (False, openrlhf_whiten, 0.707107, -1.414214))
    for unbiased, ref, pos, neg in cases:
        w = ref(tokens)
        assert (w[0], w[3]) == pytest.approx((pos, neg), abs=1e-6)
        got = reinforce_pp_baseline(t([1, 0, 0, 1]), ["g"] * 4, mask, unbiased=unbiased)
        assert got.flatten().tolist() == pytest.approx([pos] * 3 + [neg, 0, 0] + [neg, 0, 0] + [pos, 0, 0], abs=1e-5)
    # all lengths 1: verl +-0.866025, OpenRLHF +-1
    ones = t([[1], [1], [1], [1]])
    assert reinforce_pp_baseline(t([1, 0, 0, 1]), ["g"] * 4, ones)[:, 0].tolist() == pytest.approx(
        [0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5)
    assert reinforce_pp_baseline(t([1, 0, 0, 1]), ["g"] * 4, ones, unbiased=False)[:, 0].tolist() == pytest.approx(
        [1, -1, -1, 1], abs=1e-5)


def test_reinforce_pp_baseline_group_of_one_keeps_reward():
    # group "a" alone keeps R = 1 (verl: mean := 0); group "b" centres to [-0.5, +0.5]
    w = verl_whiten([1.0, -0.5, 0.5])
    got = reinforce_pp_baseline(t([1, 0, 1]), ["a", "b", "b"], t([[1], [1], [1]]))
    assert got[:, 0].tolist() == pytest.approx(w, abs=1e-5)


# --------------------------------------------------------------------------- §1.7 ReMax
def test_remax():
    assert remax(t([1, 0, 0, 1]), t([1, 1, 1, 1])).tolist() == [0, -1, -1, 0]
    assert remax(t([1, 0, 0, 1]), t([0, 0, 0, 0])).tolist() == [1, 0, 0, 1]
    assert remax(t([1, 0]), t([0, 1])).tolist() == [1, -1]  # one greedy baseline per prompt


# --------------------------------------------------------------------------- §7 value loss
def test_value_loss_examples_and_gradient():
    # V_old = 0.5, eps = 0.2, V = 1.0 -> V_clip = 0.7
    values = t([1.0, 1.0]).requires_grad_(True)
    loss, clipped = value_loss(values, t([0.5, 0.5]), t([0.8, 1.5]), clip_eps=0.2)
    expected = [0.5 * max((1.0 - 0.8) ** 2, (0.7 - 0.8) ** 2), 0.5 * max((1.0 - 1.5) ** 2, (0.7 - 1.5) ** 2)]
    assert expected == pytest.approx([0.02, 0.32])
    assert loss.tolist() == pytest.approx(expected, abs=1e-6)
    assert clipped.tolist() == [0.0, 1.0]
    loss.sum().backward()
    # unclipped: d 0.5 (V - Ret)^2 / dV = V - Ret = 0.2; clipped branch is constant in V
    assert values.grad.tolist() == pytest.approx([0.2, 0.0], abs=1e-6)


# --------------------------------------------------------------------------- §2.2/2.3 dual-clip, DAPO
# rho, A, PPO (eps 0.2), dual-clip (c = 3), dual-clip "clipped" flag
DUAL_TABLE = [
    (1.5, +1.0, -1.2, -1.2, True),
    (1.25, +1.0, -1.2, -1.2, True),
    (0.5, +1.0, -0.5, -0.5, False),
    (1.5, -1.0, 1.5, 1.5, False),
    (0.5, -1.0, 0.8, 0.8, True),
    (5.0, -1.0, 5.0, 3.0, True),
    (5.0, +1.0, -1.2, -1.2, True),
]


def _table_inputs(rhos):
    old = t([-0.3, -1.0, -2.5, -0.7, -4.0, -1.5, -0.2])[: len(rhos)]
    return (old + t([math.log(r) for r in rhos])).requires_grad_(True), old


def test_dual_clip_table_and_gradient():
    logprobs, old = _table_inputs([row[0] for row in DUAL_TABLE])
    advantages = t([row[1] for row in DUAL_TABLE])
    loss, clipped = dual_clip(logprobs, old, advantages, 0.2, 0.2, c=3.0)
    assert loss.tolist() == pytest.approx([row[3] for row in DUAL_TABLE], abs=1e-5)
    assert loss[5].item() == pytest.approx(min(max(-(-1.0) * 5.0, -(-1.0) * 1.2), -3.0 * -1.0), abs=1e-5)
    assert clipped.tolist() == [float(row[4]) for row in DUAL_TABLE]
    loss.sum().backward()
    for i, (rho, a, _, _, is_clipped) in enumerate(DUAL_TABLE):
        assert logprobs.grad[i].item() == pytest.approx(0.0 if is_clipped else -a * rho, abs=1e-5)
    # a larger c leaves rho = 5 on the PPO branch
    loss, _ = dual_clip(t([math.log(5.0)]), t([0.0]), t([-1.0]), c=10.0)
    assert loss.item() == pytest.approx(5.0, abs=1e-5)
    with pytest.raises(ValueError):
        dual_clip(t([0.0]), t([0.0]), t([-1.0]), c=1.0)


def test_dapo_clip_higher_rows():
    logprobs, old = _table_inputs([1.5, 1.25])
    loss, clipped = ppo_clip(logprobs, old, t([1.0, 1.0]), eps_low=0.2, eps_high=0.28)
    assert loss.tolist() == pytest.approx([-min(1.5, 1.28), -1.25], abs=1e-5)
    assert clipped.tolist() == [1.0, 0.0]


# --------------------------------------------------------------------------- §2.4 GSPO
def test_gspo_formula_sheet_example():
    s = math.exp((0.1 - 0.1 + 0.3) / 3)
    assert s == pytest.approx(1.105171, abs=1e-6)
    old = t([-1.0, -2.0, -0.5])
    index = torch.tensor([0, 0, 0])
    # A = +1: max(-s, -(1 + 4e-4)) = -1.0004, clipped, no gradient
    logprobs = (old + t([0.1, -0.1, 0.3])).requires_grad_(True)
    loss, clipped = gspo(logprobs, old, t([1.0] * 3), index)
    assert loss.tolist() == pytest.approx([-1.0004] * 3, abs=1e-6)
    assert clipped.tolist() == [1.0] * 3
    loss.sum().backward()
    assert logprobs.grad.tolist() == [0.0, 0.0, 0.0]
    # A = -1: max(s, 1.0004) = s, unclipped; d loss_t / d logp_t = -A * s (GSPO-token form)
    logprobs = (old + t([0.1, -0.1, 0.3])).requires_grad_(True)
    loss, clipped = gspo(logprobs, old, t([-1.0] * 3), index)
    assert loss.tolist() == pytest.approx([s] * 3, abs=1e-6)
    assert clipped.tolist() == [0.0] * 3
    loss.sum().backward()
    assert logprobs.grad.tolist() == pytest.approx([s] * 3, abs=1e-6)


def test_gspo_interleaved_sequences_match_sequence_objective():
    # seq 0: Delta [0.1, -0.1, 0.3], A = -1 (s = e^0.1); seq 1: Delta [2e-4, 4e-4], A = +1 (s = e^3e-4, inside the clip)
    index = torch.tensor([0, 1, 0, 0, 1])
    delta = t([0.1, 2e-4, -0.1, 0.3, 4e-4])
    adv = t([-1.0, 1.0, -1.0, -1.0, 1.0])
    old = t([-1.0, -0.3, -2.0, -0.5, -0.9])
    logprobs = (old + delta).requires_grad_(True)
    loss, clipped = gspo(logprobs, old, adv, index)
    s0, s1 = math.exp(0.1), math.exp(3e-4)
    assert loss.tolist() == pytest.approx([s0, -s1, s0, s0, -s1], abs=1e-6)
    assert clipped.tolist() == [0.0] * 5
    # seq-mean-token-mean aggregation gives the paper's sequence-level gradient
    (loss * t([1 / 3, 1 / 2, 1 / 3, 1 / 3, 1 / 2])).sum().backward()
    reference = logprobs.detach().clone().requires_grad_(True)
    d = reference - old
    seq_loss = -(-1.0) * torch.exp(d[[0, 2, 3]].mean()) - 1.0 * torch.exp(d[[1, 4]].mean())
    seq_loss.backward()
    assert logprobs.grad.tolist() == pytest.approx(reference.grad.tolist(), abs=1e-6)
    assert logprobs.grad[0].item() == pytest.approx(s0 / 3, abs=1e-6)


# --------------------------------------------------------------------------- §2.5 CISPO
def test_cispo_example_and_gradient():
    # rho = 1.5, A = 1, log pi = -0.5, bounds 0.2 / 0.28 -> r_hat = 1.28
    logprobs = t([-0.5, -0.5]).requires_grad_(True)
    old = t([-0.5 - math.log(1.5), -0.5 - math.log(0.5)])  # rho = 1.5 and 0.5
    loss, clipped = cispo(logprobs, old, t([1.0, -1.0]), eps_low=1.0, eps_high=0.28)
    # token 2: no lower bound (eps_low = 1), r_hat = 0.5: -0.5 * (-1) * (-0.5) = -0.25
    assert loss.tolist() == pytest.approx([-1.28 * 1.0 * -0.5, -0.25], abs=1e-6)
    assert loss[0].item() == pytest.approx(0.64, abs=1e-6)
    assert clipped.tolist() == [1.0, 0.0]
    loss.sum().backward()
    # every token keeps its gradient -r_hat * A
    assert logprobs.grad.tolist() == pytest.approx([-1.28, 0.5], abs=1e-6)
    # verl's two-sided bounds clamp rho = 0.5 up to 0.8
    loss, clipped = cispo(t([-0.5]), old[1:], t([-1.0]), eps_low=0.2, eps_high=0.28)
    assert loss.item() == pytest.approx(-0.8 * -1.0 * -0.5, abs=1e-6)
    assert clipped.tolist() == [1.0]


# --------------------------------------------------------------------------- §2.6 TIS
def test_tis_token_weights():
    old = t([-1.0, -1.0, -1.0]).requires_grad_(True)
    w = tis_weights(old, t([-1.5, -2.0, -0.5]), cap=2.0)
    assert math.exp(0.5) == pytest.approx(1.648721, abs=1e-6)
    assert w.tolist() == pytest.approx([math.exp(0.5), min(math.exp(1.0), 2.0), math.exp(-0.5)], abs=1e-6)
    assert w[1].item() == pytest.approx(2.0, abs=1e-6)
    assert not w.requires_grad


def test_tis_sequence_weights():
    # seq 0 (positions 0, 2): Delta 0.2 + 0.3 -> e^0.5; seq 1 (positions 1, 3): 0.5 + 0.6 -> e^1.1 = 3.004, capped to 2
    old = t([-1.0, -1.0, -1.0, -1.0])
    rollout = old - t([0.2, 0.5, 0.3, 0.6])
    w = tis_weights_sequence(old, rollout, torch.tensor([0, 1, 0, 1]), cap=2.0)
    assert w.tolist() == pytest.approx([math.exp(0.5), 2.0, math.exp(0.5), 2.0], abs=1e-6)


# --------------------------------------------------------------------------- §2.7 AReaL decoupled PPO
def test_decoupled_ppo_example_and_gradient():
    # behav -1.2, prox -1.0, theta -0.8, A = +1: w = u = e^0.2 = 1.221403; u clipped to 1.2
    w = math.exp(0.2)
    assert w * 1.2 == pytest.approx(1.465683, abs=1e-6)
    logprobs = t([-0.8, -1.1]).requires_grad_(True)
    prox, behav, adv = t([-1.0, -1.0]), t([-1.2, -1.2]), t([1.0, 1.0])
    loss, clipped = decoupled_ppo(logprobs, prox, behav, adv, 0.2, 0.2)
    u1 = math.exp(-0.1)  # token 2: theta -1.1, inside the clip range
    assert loss.tolist() == pytest.approx([-w * 1.2, -w * u1], abs=1e-6)
    assert loss[0].item() == pytest.approx(-1.465683, abs=1e-6)
    assert clipped.tolist() == [1.0, 0.0]
    loss.sum().backward()
    # clipped token: no gradient; unclipped: d(-w A u)/d logp = -w A u (w detached)
    assert logprobs.grad.tolist() == pytest.approx([0.0, -w * u1], abs=1e-6)
    # a cap below w masks the tokens (legacy behave_imp_weight_cap); a cap above changes nothing
    loss, clipped = decoupled_ppo(logprobs, prox, behav, adv, weight_cap=1.1)
    assert loss.tolist() == [0.0, 0.0] and clipped.tolist() == [1.0, 1.0]
    loss, _ = decoupled_ppo(logprobs, prox, behav, adv, weight_cap=5.0)
    assert loss.tolist() == pytest.approx([-w * 1.2, -w * u1], abs=1e-6)


# --------------------------------------------------------------------------- §5 entropy
def test_entropy_from_logits():
    z = [1.0, 2.0, 3.0]
    total = sum(math.exp(v) for v in z)
    p = [math.exp(v) / total for v in z]
    assert p == pytest.approx([0.090031, 0.244728, 0.665241], abs=1e-6)
    h = -sum(q * math.log(q) for q in p)
    assert h == pytest.approx(0.832396, abs=1e-6)
    got = entropy_from_logits(t([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))
    assert got.tolist() == pytest.approx([h, math.log(3)], abs=1e-6)
    # temperature 2 on [2, 4, 6] is the same distribution
    assert entropy_from_logits(t([[2.0, 4.0, 6.0]]), temperature=2.0).tolist() == pytest.approx([h], abs=1e-6)


# --------------------------------------------------------------------------- §6 DAPO filters
def test_dynamic_sampling_keep():
    rewards = [1, 0, 0, 1] + [1, 1, 1, 0] + [1, 1, 1, 1] + [0, 0, 0, 0] + [1]
    ids = ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["d"] * 4 + ["solo"]
    expected = [True] * 8 + [False] * 8 + [True]
    assert dynamic_sampling_keep(t(rewards), ids) == expected
    assert dynamic_sampling_keep([float(r) for r in rewards], ids) == expected
    # +-1 rewards (DAPO's Eq. 7) work the same way; interleaved group ids
    assert dynamic_sampling_keep([1, -1, -1, -1], ["x", "y", "x", "y"]) == [True, False, True, False]


def test_overlong_mask():
    assert overlong_mask(["stop", "length", "eos", "length"]) == [1.0, 0.0, 1.0, 0.0]


def test_soft_overlong_penalty_paper_table():
    max_len, cache = 20480, 4096
    start = max_len - cache  # 16384
    expected = [0.0, 0.0, (start - 18432) / cache, (start - 20480) / cache, -1.0]
    assert expected == [0.0, 0.0, -0.5, -1.0, -1.0]
    assert soft_overlong_penalty([16000, 16384, 18432, 20480, 20481], max_len, cache) == expected
    with pytest.raises(ValueError):
        soft_overlong_penalty([1], 10, 0)


# --------------------------------------------------------------------------- import rule
@pytest.mark.parametrize("module", [advantages, policy_losses, filters])
def test_zoo_imports_only_torch_and_algos(module):
    tree = ast.parse(Path(module.__file__).read_text())
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            top = name.split(".")[0]
            assert top in {"torch", "math", "__future__", "collections"} or name.startswith("rlyard.algos"), name
