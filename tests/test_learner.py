"""Learner.train_step against a hand-built PPO-clip token-mean loss on a plain full forward.

Gradients are read from the parameters' .grad after train_step: the learner zeroes them at the
start of each minibatch and only clips (max_grad_norm is set huge here) before the optimizer
step, so .grad holds exactly the gradient it stepped with. The reference gradients come from a
deep copy of the model taken before the step.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch

from rlyard.config import AlgoConfig
from rlyard.engines import HFEngine
from rlyard.orchestrate.rollout import render_prompt
from rlyard.train import Learner
from rlyard.types import SamplingParams, Trajectory

T = 0.8  # sampling and learner temperature
NO_CLIP = 1e9  # max_grad_norm that never rescales


def make_traj(prompt: list[int], completion: list[int], logprobs: list[float], group: str, reward: float = 0.0) -> Trajectory:
    return Trajectory(
        task_id=group, group_id=group, token_ids=prompt + completion,
        loss_mask=[0] * len(prompt) + [1] * len(completion),
        behaviour_logprobs=[0.0] * len(prompt) + list(logprobs),
        policy_versions=[-1] * len(prompt) + [0] * len(completion), reward=reward,
    )


def perturbed(logprobs: list[float], seed: int) -> list[float]:
    """Behaviour logprobs off by up to +-0.4, so some ratios leave [0.8, 1.2] and get clipped."""
    g = torch.Generator().manual_seed(seed)
    return (torch.tensor(logprobs) + (torch.rand(len(logprobs), generator=g) - 0.5) * 0.8).tolist()


@pytest.fixture
def prompts(tokenizer):
    return [
        render_prompt(tokenizer, [{"role": "user", "content": "Say something."}]),
        render_prompt(tokenizer, [{"role": "user", "content": "Name a colour, then a number below ten."}]),
    ]


@pytest.fixture
def sampled(tiny_model, tokenizer, prompts):
    """4 completions per prompt from the real engine, cut to different lengths (1 to 6 tokens)."""
    engine = HFEngine(tiny_model, tokenizer.pad_token_id)
    groups = engine.generate(prompts, SamplingParams(temperature=T, max_new_tokens=6, seed=11), n=4)
    cuts = [6, 3, 5, 1]
    return [[(c.token_ids[:k], c.logprobs[:k]) for c, k in zip(group, cuts)] for group in groups]


def full_logprobs(model, traj: Trajectory) -> torch.Tensor:
    """log softmax(logits / T) of the loss_mask == 1 tokens, from one forward of the whole sequence."""
    ids = torch.tensor([traj.token_ids])
    logits = model(input_ids=ids).logits[0, :-1].float() / T
    lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return lp[torch.tensor(traj.loss_mask[1:], dtype=torch.bool)]


def hand_loss(model, batch, advantages, normaliser: float, eps_low=0.2, eps_high=0.2) -> torch.Tensor:
    """sum over every sampled token of max(-A rho, -A clip(rho, 1-eps_low, 1+eps_high)), / normaliser."""
    loss = torch.zeros(())
    for traj, a in zip(batch, advantages):
        lp = full_logprobs(model, traj)
        old = torch.tensor([b for b, m in zip(traj.behaviour_logprobs, traj.loss_mask) if m])
        rho = torch.exp(lp - old)
        loss = loss + torch.maximum(-a * rho, -a * rho.clamp(1 - eps_low, 1 + eps_high)).sum()
    return loss / normaliser


def hand_grads(model, batch, advantages, normaliser) -> dict[str, torch.Tensor]:
    reference = copy.deepcopy(model)
    reference.train()
    hand_loss(reference, batch, advantages, normaliser).backward()
    return {name: p.grad.detach().clone() for name, p in reference.named_parameters()}


def learner_grads(learner: Learner) -> dict[str, torch.Tensor]:
    return {name: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
            for name, p in learner.model.named_parameters()}


def max_rel_diff(a: dict, b: dict) -> float:
    scale = max(v.abs().max().item() for v in b.values())
    return max((a[k] - b[k]).abs().max().item() for k in b) / scale


def grpo_by_hand(rewards: list[float]) -> list[float]:
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    return [(r - mean) / (std + 1e-6) for r in rewards]


def test_zero_advantage_sequences_skipped_but_counted_in_normaliser(tiny_model, prompts, sampled):
    # prompt 0: rewards [1, 0, 1, 0] (learns); prompt 1: all 1 (zero advantage, skipped)
    batch = [make_traj(prompts[0], tok, perturbed(lp, i), "g0") for i, (tok, lp) in enumerate(sampled[0])]
    batch += [make_traj(prompts[1], tok, perturbed(lp, 10 + i), "g1") for i, (tok, lp) in enumerate(sampled[1])]
    advantages = grpo_by_hand([1, 0, 1, 0]) + [0.0] * 4
    all_tokens = sum(t.num_sampled_tokens for t in batch)  # 2 * (6 + 3 + 5 + 1) = 30
    live_tokens = sum(t.num_sampled_tokens for t in batch[:4])  # 15
    assert (all_tokens, live_tokens) == (30, 15)
    expected = hand_grads(tiny_model, batch, advantages, all_tokens)
    wrong_normaliser = hand_grads(tiny_model, batch, advantages, live_tokens)

    learner = Learner(tiny_model, AlgoConfig(lr=1e-3, max_grad_norm=NO_CLIP), T, micro_batch_size=8)
    metrics = learner.train_step(batch, advantages)
    got = learner_grads(learner)
    assert metrics["train/skipped_sequences"] == 0.5
    assert max_rel_diff(got, expected) < 1e-4
    assert max_rel_diff(got, wrong_normaliser) > 0.3  # the check can tell the two normalisers apart
    total_norm = math.sqrt(sum(float((g**2).sum()) for g in expected.values()))
    assert metrics["loss/grad_norm"] == pytest.approx(total_norm, rel=1e-4)
    assert 0.0 < metrics["loss/clip_fraction"] < 1.0  # the perturbation really clips some tokens


def test_a_batch_with_no_signal_does_not_step(tiny_model, prompts, sampled):
    """Every group's rewards equal: nothing is backpropagated and AdamW does not move on its
    momentum; the next batch with a signal is the optimizer's second step."""
    batch = [make_traj(prompts[0], tok, lp, "g0") for tok, lp in sampled[0]]
    learner = Learner(tiny_model, AlgoConfig(lr=1e-2, max_grad_norm=NO_CLIP), T, micro_batch_size=8)
    learner.train_step(batch, grpo_by_hand([1, 0, 1, 0]))
    before = {name: p.detach().clone() for name, p in learner.model.named_parameters()}
    first = next(iter(learner.model.parameters()))
    moments = learner.optimizer.state[first]["exp_avg"].clone()

    metrics = learner.train_step(batch, [0.0] * 4)
    assert metrics["train/skipped_sequences"] == 1.0 and metrics["loss/grad_norm"] == 0.0
    assert all(torch.equal(before[name], p) for name, p in learner.model.named_parameters())
    assert torch.equal(learner.optimizer.state[first]["exp_avg"], moments)
    learner.train_step(batch, grpo_by_hand([0, 1, 1, 0]))
    assert learner.optimizer.state[first]["step"] == 2


def test_prompt_positions_do_not_enter_the_loss(tiny_model, prompts, sampled):
    """Changing behaviour logprobs where loss_mask == 0 changes neither gradients nor metrics."""
    advantages = grpo_by_hand([1, 0, 0, 1])
    clean = [make_traj(prompts[0], tok, lp, "g") for tok, lp in sampled[0]]  # rho = 1 on every sampled token
    noisy = copy.deepcopy(clean)
    for traj in noisy:
        for t in range(traj.prompt_length):
            traj.behaviour_logprobs[t] = -3.7 - 0.1 * t
            traj.policy_versions[t] = 99

    results = []
    for batch in (clean, noisy):
        learner = Learner(copy.deepcopy(tiny_model), AlgoConfig(lr=1e-3, max_grad_norm=NO_CLIP), T, micro_batch_size=8)
        metrics = learner.train_step(batch, advantages)
        results.append((metrics, learner_grads(learner)))
    (m_clean, g_clean), (m_noisy, g_noisy) = results
    assert all(torch.equal(g_clean[k], g_noisy[k]) for k in g_clean)
    for key in ("loss/policy", "loss/clip_fraction", "loss/ratio_mean", "loss/grad_norm"):
        assert m_clean[key] == m_noisy[key], key
    # rho = 1 exactly up to float error: nothing clipped, ratio mean 1
    assert m_noisy["loss/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m_noisy["loss/clip_fraction"] == 0.0
    # with rho = 1 each token's loss is -A: the mean over the sum(loss_mask) tokens
    lengths = [t.num_sampled_tokens for t in clean]
    assert sum(lengths) == sum(sum(t.loss_mask) for t in clean) == 15
    expected_policy = sum(-a * n for a, n in zip(advantages, lengths)) / sum(lengths)
    assert m_noisy["loss/policy"] == pytest.approx(expected_policy, abs=1e-4)


def test_multi_turn_trajectory_scores_only_sampled_tokens(tiny_model, tokenizer, prompts):
    """prompt | turn 1 (sampled) | tool text (mask 0) | turn 2 (sampled): only the two turns train."""
    engine = HFEngine(tiny_model, tokenizer.pad_token_id)
    prompt = prompts[0]
    turn1 = engine.generate([prompt], SamplingParams(temperature=T, max_new_tokens=4, seed=1))[0][0]
    tool = tokenizer.encode("<|im_end|>\n<|im_start|>user\nresult: 42<|im_end|>\n<|im_start|>assistant\n")
    turn2 = engine.generate([prompt + turn1.token_ids + tool], SamplingParams(temperature=T, max_new_tokens=3, seed=2))[0][0]
    ids = prompt + turn1.token_ids + tool + turn2.token_ids
    mask = [0] * len(prompt) + [1] * 4 + [0] * len(tool) + [1] * 3
    behaviour = [0.0] * len(prompt) + perturbed(turn1.logprobs, 1) + [0.0] * len(tool) + perturbed(turn2.logprobs, 2)
    traj = Trajectory(task_id="mt", group_id="mt", token_ids=ids, loss_mask=mask, behaviour_logprobs=behaviour,
                      policy_versions=[0 if m else -1 for m in mask], turns=2)
    assert traj.prompt_length == len(prompt) and traj.num_sampled_tokens == 7
    advantage = [0.9]
    expected = hand_grads(tiny_model, [traj], advantage, 7)

    # a loss that wrongly also scored the tool tokens (behaviour logprob 0) would differ
    leaky = copy.deepcopy(traj)
    leaky.loss_mask = [0] * len(prompt) + [1] * (len(ids) - len(prompt))
    leaky.behaviour_logprobs = behaviour[: len(prompt)] + perturbed(turn1.logprobs, 1) + \
        full_logprobs(tiny_model, leaky)[4 : 4 + len(tool)].tolist() + perturbed(turn2.logprobs, 2)
    wrong = hand_grads(tiny_model, [leaky], advantage, len(ids) - len(prompt))

    learner = Learner(copy.deepcopy(tiny_model), AlgoConfig(lr=1e-3, max_grad_norm=NO_CLIP), T, micro_batch_size=8)
    metrics = learner.train_step([traj], advantage)
    got = learner_grads(learner)
    assert max_rel_diff(got, expected) < 1e-4
    assert max_rel_diff(got, wrong) > 0.05

    # behaviour logprobs written at the tool positions are ignored too
    odd = copy.deepcopy(traj)
    for t, m in enumerate(odd.loss_mask):
        if not m:
            odd.behaviour_logprobs[t] = 5.0
    learner2 = Learner(copy.deepcopy(tiny_model), AlgoConfig(lr=1e-3, max_grad_norm=NO_CLIP), T, micro_batch_size=8)
    metrics2 = learner2.train_step([odd], advantage)
    assert all(torch.equal(got[k], v) for k, v in learner_grads(learner2).items())
    assert metrics2["loss/policy"] == metrics["loss/policy"]


@pytest.mark.parametrize("epochs, minibatches", [(1, 1), (2, 2)])
def test_micro_batch_size_does_not_change_the_update(tiny_model, prompts, sampled, epochs, minibatches):
    """One continuation per forward/backward vs eight: the same gradient and the same Adam step.

    Adam divides by sqrt(v) + 1e-8, so float rounding in a gradient entry of ~1e-8 (the sum
    order differs) can move that entry's step by a sizeable fraction of lr; lr = 1e-5 keeps
    every difference under 1e-6 (measured: <= 3e-7 over 4 steps with 1 or 2 threads) while a
    typical weight moves by ~1e-5 per step.
    """
    batch = [make_traj(prompts[g], tok, perturbed(lp, 10 * g + i), f"g{g}") for g in range(2) for i, (tok, lp) in enumerate(sampled[g])]
    advantages = grpo_by_hand([1, 0, 0, 0]) + grpo_by_hand([0, 1, 1, 0])
    lr = 1e-5
    algo = AlgoConfig(lr=lr, ppo_epochs=epochs, minibatches=minibatches, max_grad_norm=NO_CLIP)
    models, grads, metrics = [], [], []
    for size in (1, 8):
        model = copy.deepcopy(tiny_model)
        learner = Learner(model, algo, T, micro_batch_size=size)
        metrics.append(learner.train_step(batch, advantages))
        models.append(model)
        grads.append(learner_grads(learner))
    assert metrics[0]["train/skipped_sequences"] == metrics[1]["train/skipped_sequences"] == 0.0
    assert max_rel_diff(grads[0], grads[1]) < 1e-5  # the last minibatch's gradient, accumulated
    assert metrics[0]["loss/grad_norm"] == pytest.approx(metrics[1]["loss/grad_norm"], rel=1e-5)
    flat = lambda model: torch.cat([p.detach().flatten() for p in model.parameters()])  # noqa: E731
    one, eight, before = flat(models[0]), flat(models[1]), flat(tiny_model)
    # Adam's step is ~lr * sign(g) for a gradient entry near 1e-9, so rounding that flips such an
    # entry's sign moves its weight by ~lr: differences above 1e-6 may only sit on those entries.
    grad_flat = torch.cat([g.flatten() for g in grads[1].values()])  # same order as parameters()
    assert len(grad_flat) == len(one)
    off = (one - eight).abs() > 1e-6
    assert (grad_flat.abs()[off] < 1e-7).all(), "a weight with a real gradient moved differently"
    assert (one - eight).abs().mean().item() < 1e-9  # nearly every weight agrees to float precision
    assert (one - before).abs().median().item() > 0.5 * lr  # the steps did move the weights


def test_infra_error_episodes_do_not_change_the_update(tiny_model, prompts, sampled):
    """An episode whose grader crashed is 'not the policy's fault' and is dropped from its group;
    it should not shrink everyone else's gradient by inflating the normaliser."""
    valid = [make_traj(prompts[0], tok, perturbed(lp, i), "g0") for i, (tok, lp) in enumerate(sampled[0])]
    crashed = [make_traj(prompts[1], tok, lp, "g1") for tok, lp in sampled[1]]
    for traj in crashed:
        traj.infra_error, traj.finish_reason = True, "infra_error"
    advantages = grpo_by_hand([1, 0, 1, 0])
    expected = hand_grads(tiny_model, valid, advantages, sum(t.num_sampled_tokens for t in valid))
    learner = Learner(copy.deepcopy(tiny_model), AlgoConfig(lr=1e-3, max_grad_norm=NO_CLIP), T, micro_batch_size=8)
    learner.train_step(valid + crashed, advantages + [0.0] * len(crashed))  # compute_advantages gives them 0
    assert max_rel_diff(learner_grads(learner), expected) < 1e-4


def test_kl_term_without_lora_is_refused(tiny_model, prompts, sampled):
    batch = [make_traj(prompts[0], tok, lp, "g") for tok, lp in sampled[0]]
    learner = Learner(tiny_model, AlgoConfig(kl_coef=0.1), T, micro_batch_size=8)
    with pytest.raises(ValueError, match="LoRA"):
        learner.train_step(batch, grpo_by_hand([1, 0, 0, 1]))
