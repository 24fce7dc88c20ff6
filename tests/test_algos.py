"""rlyard.algos against hand-computed numbers from the papers' formulas: GRPO (DeepSeekMath,
arXiv:2402.03300), PPO clip (arXiv:1707.06347) and DAPO's clip-higher (arXiv:2503.14476), verl's
loss aggregation modes, Schulman's KL estimators (joschu.net/blog/kl-approx.html); the formulas
as rlyard implements them are in docs/algorithms.md.

Every expected value is computed here from the paper formula with plain `math`, never by
calling the function under test a second time.
"""
from __future__ import annotations

import math

import pytest
import torch

from rlyard.algos import grpo, group_indices, kl_estimate, ppo_clip, token_weights

EPS = 1e-6  # rlyard's GRPO epsilon (verl's)


def sample_std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


# --------------------------------------------------------------------------- §1.2 GRPO
def test_grpo_two_correct_of_four_matches_formula_sheet():
    rewards = [1.0, 0.0, 0.0, 1.0]
    # mean 0.5, sample std sqrt(4 * 0.25 / 3) = 0.577350 -> 0.5 / (0.577350 + 1e-6) = 0.866024
    std = math.sqrt((4 * 0.5**2) / 3)
    assert std == pytest.approx(0.577350, abs=1e-6)
    a = 0.5 / (std + EPS)
    assert a == pytest.approx(0.866024, abs=1e-6)
    got = grpo(torch.tensor(rewards), ["g"] * 4)
    assert got.tolist() == pytest.approx([a, -a, -a, a], abs=1e-6)
    # not the population std (0.5), which would give +-0.999998
    assert abs(got[0].item() - 0.5 / (0.5 + EPS)) > 0.1


def test_grpo_one_correct_of_four_matches_formula_sheet():
    # mean 0.25; sample std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    std = math.sqrt((0.75**2 + 3 * 0.25**2) / 3)
    expected = [0.75 / (std + EPS)] + [-0.25 / (std + EPS)] * 3
    assert expected[0] == pytest.approx(1.499997, abs=1e-6)
    assert expected[1] == pytest.approx(-0.499999, abs=1e-6)
    got = grpo(torch.tensor([1.0, 0.0, 0.0, 0.0]), ["g"] * 4)
    assert got.tolist() == pytest.approx(expected, abs=1e-6)


def test_dr_grpo_advantage_has_no_std():
    got = grpo(torch.tensor([1.0, 0.0, 0.0, 1.0]), ["g"] * 4, std_normalize=False)
    assert got.tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5], abs=1e-7)


def test_grpo_groups_interleaved_by_group_id():
    # group a: positions 0, 2, 4, 6 -> [1, 0, 0, 1]; group b: positions 1, 3, 5, 7 -> [3, 1, 2, 2]
    rewards = [1.0, 3.0, 0.0, 1.0, 0.0, 2.0, 1.0, 2.0]
    ids = ["a", "b"] * 4
    a_rewards, b_rewards = rewards[0::2], rewards[1::2]
    mean_a, mean_b = sum(a_rewards) / 4, sum(b_rewards) / 4  # 0.5, 2.0
    std_a, std_b = sample_std(a_rewards), sample_std(b_rewards)  # 0.577350, sqrt(2/3)
    expected = []
    for i, r in enumerate(rewards):
        mean, std = (mean_a, std_a) if i % 2 == 0 else (mean_b, std_b)
        expected.append((r - mean) / (std + EPS))
    got = grpo(torch.tensor(rewards), ids)
    assert got.tolist() == pytest.approx(expected, abs=1e-6)
    assert got[1].item() == pytest.approx(1.0 / (math.sqrt(2 / 3) + EPS), abs=1e-6)
    assert group_indices(ids) == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_grpo_group_of_one_and_constant_group_get_zero():
    rewards = torch.tensor([1.0, 0.7, 0.7, 0.7, 1.0, 0.0])
    ids = ["single", "same", "same", "same", "mixed", "mixed"]
    got = grpo(rewards, ids)
    assert got[0].item() == 0.0  # a group of one has no baseline
    assert got[1:4].tolist() == [0.0, 0.0, 0.0]  # std = 0 -> centred value 0
    # the mixed pair: mean 0.5, sample std sqrt(0.5) -> +-0.5/(0.707107 + 1e-6)
    a = 0.5 / (math.sqrt(0.5) + EPS)
    assert got[4:].tolist() == pytest.approx([a, -a], abs=1e-6)


# --------------------------------------------------------------------------- §2.3 PPO clip
PPO_TABLE = [
    # rho, A, PPO (0.2), clipped?, DAPO (0.2 / 0.28), clipped?
    (1.5, +1.0, -1.2, True, -1.28, True),
    (1.25, +1.0, -1.2, True, -1.25, False),
    (0.5, +1.0, -0.5, False, -0.5, False),
    (1.5, -1.0, 1.5, False, 1.5, False),
    (0.5, -1.0, 0.8, True, 0.8, True),
    (5.0, -1.0, 5.0, False, 5.0, False),
    (5.0, +1.0, -1.2, True, -1.28, True),
]


def _ppo_inputs():
    rhos = [row[0] for row in PPO_TABLE]
    old = torch.tensor([-0.3, -1.0, -2.5, -0.7, -4.0, -1.5, -0.2])  # arbitrary behaviour logprobs
    logprobs = (old + torch.tensor([math.log(r) for r in rhos])).requires_grad_(True)  # exp(logp - old) = rho
    advantages = torch.tensor([row[1] for row in PPO_TABLE])
    return logprobs, old, advantages


def test_ppo_clip_matches_table():
    logprobs, old, advantages = _ppo_inputs()
    loss, clipped = ppo_clip(logprobs, old, advantages, 0.2, 0.2)
    assert loss.tolist() == pytest.approx([row[2] for row in PPO_TABLE], abs=1e-5)
    assert clipped.tolist() == [float(row[3]) for row in PPO_TABLE]
    # hand formula max(-A rho, -A clip(rho, 0.8, 1.2)) for the first row: max(-1.5, -1.2)
    assert loss[0].item() == pytest.approx(max(-1.0 * 1.5, -1.0 * min(max(1.5, 0.8), 1.2)), abs=1e-5)


def test_ppo_clip_gradient_only_through_unclipped_tokens():
    logprobs, old, advantages = _ppo_inputs()
    loss, clipped = ppo_clip(logprobs, old, advantages, 0.2, 0.2)
    loss.sum().backward()
    for i, (rho, a, _, is_clipped, _, _) in enumerate(PPO_TABLE):
        # d(-A * exp(logp - old)) / dlogp = -A * rho; the clipped branch is constant in logp
        expected = 0.0 if is_clipped else -a * rho
        assert logprobs.grad[i].item() == pytest.approx(expected, abs=1e-5), (rho, a)


def test_dapo_clip_higher_matches_table():
    logprobs, old, advantages = _ppo_inputs()
    loss, clipped = ppo_clip(logprobs, old, advantages, 0.2, 0.28)
    assert loss.tolist() == pytest.approx([row[4] for row in PPO_TABLE], abs=1e-5)
    assert clipped.tolist() == [float(row[5]) for row in PPO_TABLE]


def test_ppo_log_ratio_is_clamped_at_20():
    # A = -1, log ratio 30: the unclipped branch wins with rho = exp(20), not exp(30)
    loss, _ = ppo_clip(torch.tensor([30.0]), torch.tensor([0.0]), torch.tensor([-1.0]))
    assert loss.item() == pytest.approx(math.exp(20.0), rel=1e-5)


# --------------------------------------------------------------------------- §4 KL estimators
def test_kl_estimators_match_formula_sheet():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    delta = -1.0 - (-1.5)  # 0.5
    k1, k2, k3 = delta, 0.5 * delta**2, math.exp(-delta) - 1.0 + delta
    assert (k1, k2) == (0.5, 0.125)
    assert k3 == pytest.approx(0.106531, abs=1e-6)
    assert kl_estimate(logp, ref, "k1").item() == pytest.approx(k1, abs=1e-7)
    assert kl_estimate(logp, ref, "k2").item() == pytest.approx(k2, abs=1e-7)
    assert kl_estimate(logp, ref, "k3").item() == pytest.approx(k3, abs=1e-6)
    # k3 is non-negative for either sign of delta; k1 is not
    assert kl_estimate(ref, logp, "k3").item() == pytest.approx(math.exp(0.5) - 1.0 - 0.5, abs=1e-6)
    assert kl_estimate(ref, logp, "k1").item() == pytest.approx(-0.5, abs=1e-7)
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_estimate(logp, ref, "k4")


# --------------------------------------------------------------------------- §3 aggregation
LOSSES = [[1.0, 2.0, 3.0], [4.0]]  # l = [[1, 2, 3], [4, pad, pad]]


def aggregate(losses: list[list[float]], weights: list[float]) -> float:
    """The batch loss the learner minimises: sum_i w_i * sum_t l_{i,t}."""
    return sum(w * sum(row) for w, row in zip(weights, losses))


@pytest.mark.parametrize(
    "mode, constant, expected",
    [
        ("token-mean", None, (1 + 2 + 3 + 4) / 4),  # 2.5
        ("seq-mean-token-mean", None, ((1 + 2 + 3) / 3 + 4 / 1) / 2),  # 3.0
        ("seq-mean-token-sum", None, ((1 + 2 + 3) + 4) / 2),  # 5.0
        ("constant", 3.0, (1 + 2 + 3 + 4) / (2 * 3)),  # oat / TRL dr_grpo with L_max = 3: 10/6
    ],
)
def test_token_weights_reproduce_aggregation_table(mode, constant, expected):
    lengths = [len(row) for row in LOSSES]
    weights = token_weights(lengths, ["g0", "g1"], mode, constant)
    assert aggregate(LOSSES, weights) == pytest.approx(expected, abs=1e-9)


def test_token_weights_table_values():
    lengths = [3, 1]
    assert aggregate(LOSSES, token_weights(lengths, ["a", "b"], "token-mean")) == pytest.approx(2.5)
    assert aggregate(LOSSES, token_weights(lengths, ["a", "b"], "seq-mean-token-mean")) == pytest.approx(3.0)
    assert aggregate(LOSSES, token_weights(lengths, ["a", "b"], "seq-mean-token-sum")) == pytest.approx(5.0)
    assert aggregate(LOSSES, token_weights(lengths, ["a", "b"], "constant", 3.0)) == pytest.approx(1.666667, abs=1e-6)


def test_prompt_mean_weights_match_example():
    losses = [[1.0, 2.0, 3.0], [4.0], [2.0], [2.0]]
    lengths, ids = [3, 1, 1, 1], ["p", "p", "q", "q"]
    # token-mean within each prompt group, then the mean over groups: (10/4 + 4/2) / 2
    expected = ((1 + 2 + 3 + 4) / 4 + (2 + 2) / 2) / 2
    assert expected == 2.25
    assert aggregate(losses, token_weights(lengths, ids, "prompt-mean")) == pytest.approx(expected, abs=1e-9)
    # the global token-mean of the same data differs: 14/6
    assert aggregate(losses, token_weights(lengths, ids, "token-mean")) == pytest.approx(14 / 6, abs=1e-9)


def test_empty_sequences_get_no_weight_and_are_not_counted():
    # B' counts sequences with L_i > 0: an empty third sequence changes neither mean
    losses = LOSSES + [[]]
    lengths, ids = [3, 1, 0], ["a", "b", "c"]
    smtm = token_weights(lengths, ids, "seq-mean-token-mean")
    assert smtm[2] == 0.0
    assert aggregate(losses, smtm) == pytest.approx(3.0)
    assert aggregate(losses, token_weights(lengths, ids, "seq-mean-token-sum")) == pytest.approx(5.0)
    assert token_weights([0, 0], ["a", "b"], "token-mean") == [0.0, 0.0]


def test_token_weights_reject_bad_modes():
    with pytest.raises(ValueError, match="positive normaliser"):
        token_weights([3, 1], ["a", "b"], "constant", None)
    with pytest.raises(ValueError, match="token-mean"):
        token_weights([3, 1], ["a", "b"], "sequence-mean")
