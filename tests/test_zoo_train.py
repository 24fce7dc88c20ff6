"""The algorithm zoo wired into a run: every preset end to end through `rlyard train ... algo=<name>`,
the PPO critic's checkpoint and resume, and the wiring math (advantages dispatch, per-token
advantages, TIS, the value loss, overlong handling, dynamic sampling) checked by hand.

Expected numbers come from the papers' worked formulas (cited in docs/algorithms.md: GAE
arXiv:1506.02438, REINFORCE++ arXiv:2501.03262, DAPO arXiv:2503.14476 ...) or are computed here
with plain Python from the formulas, never by calling the code under test twice.
"""
from __future__ import annotations

import copy
import itertools
import json
import math
import statistics
from pathlib import Path

import pytest
import torch
import yaml

from rlyard.cli import main
from rlyard.config import ALGO_PRESETS, ConfigError, load_config
from rlyard.engines import HFEngine
from rlyard.envs import Family, SingleTurnEnv, register
from rlyard.orchestrate.rollout import render_prompt
from rlyard.orchestrate.setup import build
from rlyard.orchestrate.sampling import sample_batch
from rlyard.orchestrate.entry import train
from rlyard.orchestrate.targets import compute_advantages
from rlyard.train import Learner, load_checkpoint
from rlyard.train.learner import TokenScores
from rlyard.types import Reward, SamplingParams, Task, Trajectory

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
PRESET_DIR = ROOT / "configs" / "algos"
T = 0.8  # learner temperature in the hand-checked learner tests
NO_CLIP = 1e9


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tiny_overrides(model_dir: Path, run_dir: Path, *extra: str) -> list[str]:
    """configs/quickstart.yaml shrunk to the tiny llama on the toy family: 2 prompts x 4 samples x 6 tokens.

    The random tiny llama almost never stops by itself, so replies cut at max_new_tokens are
    verified as they are (rollout.truncated_reward=null): a quarter of them hit the target.
    """
    return [
        f"model.name={model_dir}", "model.lora.rank=4", "model.lora.alpha=8", "env.name=toy", "env.options={}",
        "env.train_size=8", "rollout.prompts_per_step=2", "rollout.n=4", "rollout.max_new_tokens=6", "rollout.truncated_reward=null",
        "rollout.temperature=1.0", "eval.size=0", "train.steps=2", "output.progress=false", "output.plot=false",
        "output.checkpoint_every=0", f"output.run_dir={run_dir}", *extra,
    ]


# --------------------------------------------------------------------------- presets and the override
def test_there_is_a_preset_file_for_every_name():
    assert sorted(p.stem for p in PRESET_DIR.glob("*.yaml")) == sorted(ALGO_PRESETS)
    for name in ALGO_PRESETS:
        preset = yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text())
        assert preset["name"] == name
        load_config(QUICKSTART, [f"algo={name}"])  # each one validates on top of the quickstart


@pytest.mark.parametrize("name", ALGO_PRESETS)
def test_every_preset_trains_through_the_cli(name, tmp_path, tiny_model_dir, capsys):
    run_dir = tmp_path / name
    assert main(["train", str(QUICKSTART), f"algo={name}", *tiny_overrides(tiny_model_dir, run_dir)]) == 0
    assert "done: 2 steps" in capsys.readouterr().out
    # the preset landed in the algo section; the quickstart's other algo keys (lr) stayed
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())["algo"]
    preset = yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text())
    assert {key: saved[key] for key in preset} == preset
    assert saved["lr"] == yaml.safe_load(QUICKSTART.read_text())["algo"]["lr"]
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]
    assert rows[0]["loss/grad_norm"] > 0  # step 1 has mixed rewards (seeded): the wiring produced a gradient
    for row in rows:
        for key, value in row.items():
            assert isinstance(value, (int, float)) and math.isfinite(value), (name, key, value)
    expected = {"ppo": "loss/value", "reinforce_pp": "reward/kl_penalty", "dapo": "rollout/sampling_rounds",
                "remax": "reward/greedy_baseline"}
    if name in expected:
        assert all(expected[name] in row for row in rows), expected[name]
    checkpoint = run_dir / "checkpoints" / "step_000002"
    assert (checkpoint / "weights.pt").exists()
    assert (checkpoint / "critic.pt").exists() == (name == "ppo")


def test_unknown_preset_lists_the_available_ones(capsys):
    assert main(["train", str(QUICKSTART), "algo=ppo2"]) == 2
    err = capsys.readouterr().err
    assert "algo=ppo2" in err and "configs/algos/ppo2.yaml" in err
    available = err.split("available:", 1)[1]
    for name in ALGO_PRESETS:
        assert name in available


def test_preset_loads_before_every_dotted_override():
    config = load_config(QUICKSTART, ["algo.lr=0.125", "algo.lam=0.5", "algo=ppo"])
    assert (config.algo.name, config.algo.advantage, config.algo.lr, config.algo.lam) == ("ppo", "gae", 0.125, 0.5)
    assert load_config(QUICKSTART, ["algo=grpo"]) == load_config(QUICKSTART)  # the quickstart is the grpo preset


@pytest.mark.parametrize("overrides, fragments", [
    (["algo.name=ppo"], ["algo.advantage:", "'gae'", "algo=ppo"]),
    (["algo=gspo", "algo.loss=ppo_clip"], ["algo.loss:", "'gspo'"]),
    (["algo.kl_in_reward=true", "algo.kl_coef=0.1"], ["algo.kl_in_reward:", "gae or reinforce_pp"]),
    (["algo=dapo", "algo.soft_overlong_cache_len=17"], ["algo.soft_overlong_cache_len", "16"]),
    (["algo.tis_cap=0.5"], ["algo.tis_cap:", "greater than or equal to 1"]),
    (["algo.loss=ppo"], ["algo.loss:", "'dual_clip'", "'cispo'"]),
])
def test_algo_errors_name_the_field(overrides, fragments):
    with pytest.raises(ConfigError) as info:
        load_config(QUICKSTART, overrides)
    for fragment in fragments:
        assert fragment in str(info.value)


# --------------------------------------------------------------------------- every option at once, end to end
def test_ppo_with_kl_reward_dual_clip_tis_and_entropy(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "mix"
    config = load_config(QUICKSTART, tiny_overrides(tiny_model_dir, run_dir, "algo=ppo", "algo.kl_in_reward=true",
                                                    "algo.kl_coef=0.05", "algo.loss=dual_clip", "algo.tis_cap=2",
                                                    "algo.entropy_coef=0.01", "algo.minibatches=2", "algo.ppo_epochs=2"))
    train(config, run_dir)
    rows = read_jsonl(run_dir / "metrics.jsonl")
    for key in ("loss/value", "reward/kl_penalty", "train/tis_weight_mean", "train/logprob_mismatch", "loss/entropy"):
        assert all(key in row and math.isfinite(row[key]) for row in rows), key
    for row in rows:
        assert row["train/logprob_mismatch"] < 1e-3  # engine and trainer agree to float precision here
        assert row["train/tis_weight_mean"] == pytest.approx(1.0, abs=1e-3)


# --------------------------------------------------------------------------- PPO's critic: checkpoint and resume
PPO_RESUME = ["algo=ppo", "algo.lr=2e-2", "algo.value_lr=5e-2", "output.checkpoint_every=2"]


def test_ppo_critic_resumes_exactly(tmp_path, tiny_model_dir):
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    train(load_config(QUICKSTART, tiny_overrides(tiny_model_dir, run_a, *PPO_RESUME, "train.steps=4")), run_a)
    train(load_config(QUICKSTART, tiny_overrides(tiny_model_dir, run_b, *PPO_RESUME, "train.steps=2")), run_b)
    saved = yaml.safe_load((run_b / "config.yaml").read_text())
    saved["train"]["steps"] = 4
    from rlyard.config import build_config

    config_b = build_config(saved)

    # load_checkpoint puts the value head and its optimizer back bit for bit
    c = build(config_b)
    step2 = run_b / "checkpoints" / "step_000002"
    stored = torch.load(step2 / "critic.pt", weights_only=True)
    assert stored["head"]["weight"].abs().max() > 0  # two steps did train the head (it starts at 0)
    load_checkpoint(step2, c.model, c.learner.optimizer, c.learner.critic)
    assert torch.equal(c.learner.critic.head.weight, stored["head"]["weight"])
    assert torch.equal(c.learner.critic.head.bias, stored["head"]["bias"])
    adam = c.learner.critic.optimizer.state_dict()["state"]
    assert all(torch.equal(adam[k]["exp_avg_sq"], stored["optimizer"]["state"][k]["exp_avg_sq"]) for k in adam)

    # the resumed run matches the uninterrupted one: samples, losses, policy and critic weights
    train(config_b, run_b, resume=True)
    assert read_jsonl(run_b / "trajectories.jsonl") == read_jsonl(run_a / "trajectories.jsonl")
    metrics_a, metrics_b = read_jsonl(run_a / "metrics.jsonl"), read_jsonl(run_b / "metrics.jsonl")
    assert [m["step"] for m in metrics_b] == [1, 2, 3, 4]
    for ma, mb in zip(metrics_a, metrics_b):
        for key in ("reward/mean", "loss/policy", "loss/value", "train/value_mean"):
            assert mb[key] == pytest.approx(ma[key], abs=1e-6), (ma["step"], key)
    for name in ("weights.pt", "critic.pt"):
        a = torch.load(run_a / "checkpoints" / "step_000004" / name, weights_only=True)
        b = torch.load(run_b / "checkpoints" / "step_000004" / name, weights_only=True)
        a, b = (a["head"], b["head"]) if name == "critic.pt" else (a, b)
        assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6, name
    late = torch.load(run_a / "checkpoints" / "step_000004" / "critic.pt", weights_only=True)["head"]["weight"]
    assert (late - stored["head"]["weight"]).abs().max() > 1e-4  # steps 3-4 trained the head further


def test_loading_a_critic_from_a_checkpoint_without_one_is_refused(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "grpo"
    train(load_config(QUICKSTART, tiny_overrides(tiny_model_dir, run_dir, "train.steps=1")), run_dir)
    c = build(load_config(QUICKSTART, tiny_overrides(tiny_model_dir, run_dir, "algo=ppo")))
    with pytest.raises(ValueError, match="no critic.pt"):
        load_checkpoint(run_dir / "checkpoints" / "step_000001", c.model, c.learner.optimizer, c.learner.critic)


# --------------------------------------------------------------------------- compute_advantages by hand
def traj(group: str, reward: float, length: int, behaviour: list[float] | None = None, infra: bool = False,
         finish: str = "stop") -> Trajectory:
    prompt = [1, 2]
    behaviour = behaviour if behaviour is not None else [-1.0] * length
    return Trajectory(task_id=group, group_id=group, token_ids=prompt + [5] * length, loss_mask=[0, 0] + [1] * length,
                      behaviour_logprobs=[0.0, 0.0] + behaviour, policy_versions=[-1, -1] + [0] * length,
                      reward=reward, infra_error=infra, finish_reason="infra_error" if infra else finish)


def verl_whiten(xs: list[float]) -> list[float]:
    mean, var = statistics.fmean(xs), statistics.variance(xs)
    return [(x - mean) / math.sqrt(var + 1e-8) for x in xs]


def algo_config(*overrides: str):
    return load_config(None, ["rollout.max_new_tokens=16", *overrides])


def test_gae_advantages_and_returns_from_the_critic_values():
    # ALGORITHMS.md 1.1: r = [0, 0, 1], V = [0.5, 0.6, 0.7], gamma 1, lambda 0.95
    config = algo_config("algo=ppo", "algo.lam=0.95")
    batch = [traj("g", 1.0, 3), traj("g", 1.0, 2, infra=True)]
    scores = TokenScores(old_logprobs=None, reference_logprobs=None,
                         values=[torch.tensor([0.5, 0.6, 0.7]), torch.tensor([9.0, 9.0])])
    targets = compute_advantages(config, batch, scores)
    assert targets.advantages[0].tolist() == pytest.approx([0.991344, 0.017092, -1.008436], abs=1e-5)
    assert targets.returns[0].tolist() == pytest.approx([0.96575, 0.985, 1.0], abs=1e-6)
    assert targets.advantages[1].tolist() == [0.0, 0.0]  # the infra failure: no advantage, outside the whitening

    # with KL in the reward, beta 0.1 and k1 = old - ref = [0.1, 0.2, 0.3]: raw A = [0.409675, 0.3365, 0.27]
    config = algo_config("algo=ppo", "algo.lam=0.95", "algo.kl_in_reward=true", "algo.kl_coef=0.1", "algo.kl_estimator=k1")
    scores = TokenScores(old_logprobs=[torch.tensor([-1.0, -1.0, -1.0])], reference_logprobs=[torch.tensor([-1.1, -1.2, -1.3])],
                         values=[torch.tensor([0.5, 0.6, 0.7])])
    targets = compute_advantages(config, [traj("g", 1.0, 3)], scores)
    assert targets.advantages[0].tolist() == pytest.approx(verl_whiten([0.409675, 0.3365, 0.27]), abs=1e-5)
    assert targets.returns[0].tolist() == pytest.approx([0.909675, 0.9365, 0.97], abs=1e-6)  # A + V
    assert targets.metrics["reward/kl_penalty"] == pytest.approx(0.1 * 0.2, abs=1e-6)


def test_reinforce_pp_folds_the_kl_into_the_reward():
    # ALGORITHMS.md 1.5: beta 0.1; R = 1 with kl [0.2, 0.1]; R = 0 with kl [0, -0.1]; verl whitening
    config = algo_config("algo=reinforce_pp", "algo.kl_coef=0.1")
    batch = [traj("a", 1.0, 2, behaviour=[-1.0, -2.0]), traj("b", 0.0, 2, behaviour=[-0.5, -0.5])]
    reference = [torch.tensor([-1.2, -2.1]), torch.tensor([-0.5, -0.4])]  # k1 = behaviour - reference
    targets = compute_advantages(config, batch, TokenScores(None, reference, None))
    assert targets.advantages[0].tolist() == pytest.approx([0.848079, 0.883788], abs=1e-5)
    assert targets.advantages[1].tolist() == pytest.approx([-0.865933, -0.865933], abs=1e-5)


def test_reinforce_pp_baseline_whitens_over_tokens():
    # ALGORITHMS.md 1.6: R = [1, 0, 0, 1], lengths [3, 1, 1, 1]: +0.645497 / -1.290994 (verl)
    config = algo_config("algo=reinforce_pp_baseline")
    batch = [traj("g", r, n) for r, n in zip([1.0, 0.0, 0.0, 1.0], [3, 1, 1, 1])]
    advantages = compute_advantages(config, batch).advantages
    assert advantages[0].tolist() == pytest.approx([0.645497] * 3, abs=1e-5)
    assert [a.item() for a in advantages[1:]] == pytest.approx([-1.290994, -1.290994, 0.645497], abs=1e-5)


@pytest.mark.parametrize("greedy, expected", [(1.0, [0.0, -1.0, -1.0, 0.0]), (0.0, [1.0, 0.0, 0.0, 1.0])])
def test_remax_subtracts_the_greedy_reward(greedy, expected):
    config = algo_config("algo=remax")
    batch = [traj("g", r, 2) for r in (1.0, 0.0, 0.0, 1.0)]
    assert compute_advantages(config, batch, greedy={"g": greedy}).advantages == pytest.approx(expected)


def test_rloo_and_dr_grpo_dispatch():
    batch = [traj("g", r, 2) for r in (1.0, 0.0, 0.0, 1.0)]
    assert compute_advantages(algo_config("algo=rloo"), batch).advantages == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert compute_advantages(algo_config("algo=dr_grpo"), batch).advantages == pytest.approx([0.5, -0.5, -0.5, 0.5])


def test_soft_overlong_penalty_is_added_before_the_group_baseline():
    # L_max = rollout.max_new_tokens = 16, L_cache = 4: lengths 12 / 14 / 16 -> 0 / -0.5 / -1 (Eq. 13)
    config = algo_config("algo=dapo", "algo.soft_overlong_cache_len=4")
    batch = [traj("g", 1.0, 12), traj("g", 1.0, 14), traj("g", 1.0, 16), traj("g", 0.0, 12)]
    shaped = [1.0, 0.5, 0.0, 0.0]
    mean, std = statistics.fmean(shaped), statistics.stdev(shaped)
    targets = compute_advantages(config, batch)
    assert targets.advantages == pytest.approx([(r - mean) / (std + 1e-6) for r in shaped], abs=1e-6)
    assert targets.metrics["reward/overlong_penalty"] == pytest.approx(-1.5 / 4)


# --------------------------------------------------------------------------- the learner by hand
@pytest.fixture
def samples(tiny_model, tokenizer):
    """One prompt, 4 completions of 5 / 3 / 4 / 2 tokens from the real engine."""
    prompt = render_prompt(tokenizer, [{"role": "user", "content": "Say something."}])
    engine = HFEngine(tiny_model, tokenizer.pad_token_id)
    group = engine.generate([prompt], SamplingParams(temperature=T, max_new_tokens=5, seed=3), n=4)[0]
    return prompt, [(c.token_ids[:k], c.logprobs[:k]) for c, k in zip(group, [5, 3, 4, 2])]


def make_batch(prompt, samples, shifts=None, finish=None) -> list[Trajectory]:
    batch = []
    for i, (tokens, logprobs) in enumerate(samples):
        behaviour = [lp + (shifts[i][t] if shifts else 0.0) for t, lp in enumerate(logprobs)]
        batch.append(Trajectory(task_id="g", group_id="g", token_ids=prompt + tokens, loss_mask=[0] * len(prompt) + [1] * len(tokens),
                                behaviour_logprobs=[0.0] * len(prompt) + behaviour, policy_versions=[-1] * len(prompt) + [0] * len(tokens),
                                finish_reason=finish[i] if finish else "stop"))
    return batch


def forward(model, traj: Trajectory) -> tuple[torch.Tensor, torch.Tensor]:
    """One plain forward of the whole sequence: logprobs of the sampled tokens and the hidden states predicting them."""
    ids = torch.tensor([traj.token_ids])
    hidden = model.model(input_ids=ids).last_hidden_state[0, :-1]
    keep = torch.tensor(traj.loss_mask[1:], dtype=torch.bool)
    logits = model.lm_head(hidden).float() / T
    lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return lp[keep], hidden[keep]


def grads_of(model) -> dict[str, torch.Tensor]:
    return {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}


def max_rel_diff(a: dict, b: dict) -> float:
    scale = max(v.abs().max().item() for v in b.values())
    return max((a[k] - b[k]).abs().max().item() for k in b) / scale


def test_per_token_advantages_reach_the_loss(tiny_model, samples):
    prompt, sampled = samples
    batch = make_batch(prompt, sampled)
    g = torch.Generator().manual_seed(0)
    advantages = [torch.randn(t.num_sampled_tokens, generator=g) for t in batch]
    advantages[3] = torch.zeros(2)  # all-zero per-token advantages: skipped, still in the normaliser
    reference = copy.deepcopy(tiny_model)
    reference.train()
    total = sum(t.num_sampled_tokens for t in batch)  # 14, token-mean
    loss = torch.zeros(())
    for t, a in zip(batch, advantages):
        lp = forward(reference, t)[0]
        loss = loss + (-a * torch.exp(lp - lp.detach())).sum()
    (loss / total).backward()
    learner = Learner(tiny_model, load_config(None, ["algo.lr=1e-3", f"algo.max_grad_norm={NO_CLIP}"]).algo, T, micro_batch_size=8)
    metrics = learner.train_step(batch, advantages)
    assert metrics["train/skipped_sequences"] == 0.25
    assert max_rel_diff(grads_of(learner.model), grads_of(reference)) < 1e-4
    # broadcasting one value per sequence is the same as the per-token tensor it stands for
    flat = [0.5, -1.0, 0.25, 0.0]
    first = Learner(copy.deepcopy(reference), learner.algo, T, 8)
    second = Learner(copy.deepcopy(reference), learner.algo, T, 8)
    first.train_step(batch, flat)
    second.train_step(batch, [torch.full((t.num_sampled_tokens,), a) for t, a in zip(batch, flat)])
    assert all(torch.equal(a, b) for a, b in zip(grads_of(first.model).values(), grads_of(second.model).values()))


def test_tis_weights_the_loss_against_the_engine_logprobs(tiny_model, samples):
    """Behaviour logprobs off by -0.9 .. +0.9: w_t = min(exp(old - behaviour), 1.5), with old the
    trainer's recompute (also the PPO ratio's centre, so rho = 1 and nothing is clipped)."""
    prompt, sampled = samples
    shifts = [[0.9 * math.sin(3 * i + t) for t in range(5)] for i in range(4)]
    batch = make_batch(prompt, sampled, shifts)
    advantages = [1.0, -1.0, 0.5, -0.5]
    algo = load_config(None, ["algo.lr=1e-3", f"algo.max_grad_norm={NO_CLIP}", "algo.tis_cap=1.5"]).algo
    learner = Learner(tiny_model, algo, T, micro_batch_size=8)
    scores = learner.score(batch)

    reference = copy.deepcopy(learner.model)
    reference.train()
    loss, weights, capped, gaps = torch.zeros(()), [], 0, []
    for t, a in zip(batch, advantages):
        lp = forward(reference, t)[0]
        old = lp.detach()
        behaviour = torch.tensor([b for b, m in zip(t.behaviour_logprobs, t.loss_mask) if m])
        w = torch.tensor([min(math.exp(o - b), 1.5) for o, b in zip(old.tolist(), behaviour.tolist())])
        capped += sum(o - b > math.log(1.5) for o, b in zip(old.tolist(), behaviour.tolist()))
        gaps += [abs(o - b) for o, b in zip(old.tolist(), behaviour.tolist())]
        weights += w.tolist()
        loss = loss + (w * -a * torch.exp(lp - old)).sum()
    (loss / 14).backward()
    metrics = learner.train_step(batch, advantages, scores=scores)
    assert max_rel_diff(grads_of(learner.model), grads_of(reference)) < 1e-4
    assert 0 < capped < 14  # the example caps some tokens and not others
    assert metrics["train/tis_capped_fraction"] == pytest.approx(capped / 14)
    assert metrics["train/tis_weight_mean"] == pytest.approx(statistics.fmean(weights), rel=1e-5)
    assert metrics["train/logprob_mismatch"] == pytest.approx(statistics.fmean(gaps), rel=1e-4)
    assert metrics["loss/clip_fraction"] == 0.0
    # One update per batch: pi_old is the update's own forward, so no scoring pass is needed.
    unscored = Learner(copy.deepcopy(reference), algo, T, micro_batch_size=8)
    unscored.model.zero_grad()
    unscored_metrics = unscored.train_step(batch, advantages)
    assert max_rel_diff(grads_of(unscored.model), grads_of(reference)) < 1e-4
    assert unscored_metrics["train/tis_weight_mean"] == pytest.approx(metrics["train/tis_weight_mean"], rel=1e-5)
    assert learner.score(batch).old_logprobs is None
    # Several updates per batch: pi_old must be recorded before the first one.
    two_epochs = Learner(copy.deepcopy(reference), algo.model_copy(update={"ppo_epochs": 2}), T, micro_batch_size=8)
    assert two_epochs.score(batch).old_logprobs is not None
    with pytest.raises(ValueError, match="tis_cap"):
        two_epochs.train_step(batch, advantages)  # TIS without the trainer's old logprobs


def test_overlong_filter_drops_truncated_replies_from_loss_and_normaliser(tiny_model, samples):
    prompt, sampled = samples
    finish = ["stop", "length", "stop", "length"]
    batch = make_batch(prompt, sampled, finish=finish)
    advantages = [1.0, -1.0, 0.5, -0.5]
    algo = load_config(None, ["algo.lr=1e-3", f"algo.max_grad_norm={NO_CLIP}", "algo.overlong_filter=true"]).algo
    filtered = Learner(copy.deepcopy(tiny_model), algo, T, 8)
    filtered.train_step(batch, advantages)
    plain = Learner(copy.deepcopy(tiny_model), algo.model_copy(update={"overlong_filter": False}), T, 8)
    plain.train_step([batch[0], batch[2]], [advantages[0], advantages[2]])  # as if the truncated ones were never sampled
    assert max_rel_diff(grads_of(filtered.model), grads_of(plain.model)) < 1e-6


def test_critic_trains_on_the_clipped_value_loss(tiny_model, samples):
    """First step: V = V_old = 0 (the head starts at zero), so the clip is inactive and the head's
    gradient is sum_t w (V_t - Ret_t) h_t with w = 1/14 (token-mean); the policy gradient is
    the plain PPO one, untouched by the value term (the head reads detached features)."""
    prompt, sampled = samples
    batch = make_batch(prompt, sampled)
    algo = load_config(None, ["algo=ppo", "algo.lr=1e-3", f"algo.max_grad_norm={NO_CLIP}"]).algo
    learner = Learner(tiny_model, algo, T, micro_batch_size=3)
    scores = learner.score(batch)
    assert all(v.shape == (t.num_sampled_tokens,) and not v.any() for v, t in zip(scores.values, batch))
    g = torch.Generator().manual_seed(1)
    advantages = [torch.randn(t.num_sampled_tokens, generator=g) for t in batch]
    returns = [torch.rand(t.num_sampled_tokens, generator=g) for t in batch]

    reference = copy.deepcopy(tiny_model)
    reference.train()
    policy_loss, head_grad, bias_grad = torch.zeros(()), torch.zeros(reference.config.hidden_size), 0.0
    for t, a, ret in zip(batch, advantages, returns):
        lp, hidden = forward(reference, t)
        policy_loss = policy_loss + (-a * torch.exp(lp - lp.detach())).sum()
        head_grad += ((0.0 - ret)[:, None] * hidden.detach()).sum(0) / 14
        bias_grad += float((0.0 - ret).sum()) / 14
    (policy_loss / 14).backward()
    metrics = learner.train_step(batch, advantages, scores=scores, returns=returns)
    assert torch.allclose(learner.critic.head.weight.grad[0], head_grad, rtol=1e-4, atol=1e-6)
    assert learner.critic.head.bias.grad.item() == pytest.approx(bias_grad, rel=1e-5)
    assert max_rel_diff(grads_of(learner.model), grads_of(reference)) < 1e-4
    expected_value_loss = sum(float((0.5 * r**2).sum()) for r in returns) / 14
    assert metrics["loss/value"] == pytest.approx(expected_value_loss, rel=1e-5)
    assert metrics["loss/value_clip_fraction"] == 0.0
    assert learner.critic.head.weight.abs().max() > 0  # and the head stepped


# --------------------------------------------------------------------------- dynamic sampling
_MIXED = itertools.count()


def scripted_tasks(split: str, n: int, seed: int, **options) -> list[Task]:
    """Task i is "mixed" when i % 3 == 2 (its samples score 0, 1, 0, 1 ...), else "same" (all 1).
    options.all_same makes every task "same"."""
    kinds = ["same" if options.get("all_same") or i % 3 != 2 else "mixed" for i in range(n)]
    return [Task(id=f"s{i}", prompt=[{"role": "user", "content": "Say something."}], env="zoo_scripted", payload={"kind": kind})
            for i, kind in enumerate(kinds)]


def scripted_verify(reply: str, task: Task) -> Reward:
    return Reward(value=1.0 if task.payload["kind"] == "same" else float(next(_MIXED) % 2))


register(Family(name="zoo_scripted", make_tasks=scripted_tasks, make_env=lambda: SingleTurnEnv(scripted_verify),
                verify=scripted_verify, description="test family: a third of the tasks give mixed rewards"))


def dynamic_config(model_dir: Path, run_dir: Path, *extra: str):
    return load_config(QUICKSTART, tiny_overrides(model_dir, run_dir, "env.name=zoo_scripted", "env.train_size=12",
                                                  "rollout.prompts_per_step=3", "rollout.max_new_tokens=2", "algo=dapo",
                                                  "algo.soft_overlong=false", "algo.max_sampling_tries=6", *extra))


def test_dynamic_sampling_refills_until_the_batch_is_full(tmp_path, tiny_model_dir):
    config = dynamic_config(tiny_model_dir, tmp_path)
    c = build(config)
    order = copy.deepcopy(c.stream).next(12)  # the stream's order; the expected refills follow from it
    want, position, rounds, kept, dropped = 3, 0, 0, [], 0
    while len(kept) < want and rounds < 6:
        draw = order[position : position + want - len(kept)]
        position, rounds = position + len(draw), rounds + 1
        kept += [task.id for task in draw if task.payload["kind"] == "mixed"]
        dropped += sum(task.payload["kind"] == "same" for task in draw)
    assert rounds > 1  # the example needs refills (4 of 12 tasks are mixed)

    batch, greedy, metrics = sample_batch(c, config, step=0)
    assert greedy is None
    assert metrics["rollout/sampling_rounds"] == rounds and metrics["rollout/dropped_groups"] == dropped
    assert c.stream.position == position
    assert [t.task_id for t in batch[::4]] == kept and len(batch) == 4 * len(kept)
    assert len({t.group_id for t in batch}) == len(kept)
    for k in range(len(kept)):
        assert sorted(t.reward for t in batch[4 * k : 4 * k + 4]) == [0.0, 0.0, 1.0, 1.0]


def test_dynamic_sampling_stops_at_the_cap(tmp_path, tiny_model_dir):
    config = dynamic_config(tiny_model_dir, tmp_path, "env.options={all_same: true}", "algo.max_sampling_tries=3")
    c = build(config)
    batch, _, metrics = sample_batch(c, config, step=0)
    assert metrics["rollout/sampling_rounds"] == 3 and metrics["rollout/dropped_groups"] == 9
    assert c.stream.position == 9  # 3 prompts per round, nothing ever kept
    assert len(batch) == 12 and {t.reward for t in batch} == {1.0}  # the last round, trained as is
    assert all(t.group_id.startswith("0.2/") for t in batch)
