"""The synchronous loop: sample a batch, score it, train on it, push weights, repeat.

prompts -> n rollouts per prompt -> verify -> advantages -> PPO epochs -> update_weights.
The algorithm's extra steps plug in around it: DAPO's dynamic sampling and ReMax's greedy
baseline in `sample_batch`, the learner's no-grad pass (TIS, KL in the reward, the critic's
values) before `compute_advantages`, which dispatches on `algo.advantage`.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlyard.algos import grpo, kl_estimate
from rlyard.algos.estimators import dr_grpo, gae, kl_token_rewards, reinforce_pp, reinforce_pp_baseline, remax, rloo, whiten
from rlyard.algos.filters import dynamic_sampling_keep, soft_overlong_penalty
from rlyard.config import RunConfig, dump_config, soft_overlong_lengths
from rlyard.observe import MetricsLogger, TrajectoryStore, plot_reward_curve, trajectory_row
from rlyard.observe.store import write_atomic
from rlyard.orchestrate.evaluate import evaluate
from rlyard.orchestrate.rollout import rollout
from rlyard.orchestrate.setup import Components, build, push_weights
from rlyard.train import latest_checkpoint, load_checkpoint, save_checkpoint
from rlyard.train.learner import TokenScores, sampled_behaviour_logprobs
from rlyard.types import SamplingParams, Task, Trajectory


@dataclass
class RunResult:
    run_dir: Path
    steps: int
    base_accuracy: float | None
    final_accuracy: float | None
    train_seconds: float
    wall_seconds: float


def sampling_for_step(config: RunConfig, step: int, stop_ids: tuple[int, ...], round_: int = 0) -> SamplingParams:
    """Seeded by (seed, step, round) alone, so a resumed run samples exactly what the original would.

    Round 0 is the step's first rollout; later rounds are dynamic-sampling refills.
    """
    r = config.rollout
    seed = config.train.seed * 1_000_003 + step + round_ * 1_000_000_007
    return SamplingParams(r.temperature, r.top_p, r.top_k, r.max_new_tokens, stop_ids, seed=seed)


def sample_batch(c: Components, config: RunConfig, step: int) -> tuple[list[Trajectory], dict[str, float] | None, dict[str, float]]:
    """One step's rollouts: prompts_per_step groups of n samples; with ReMax the greedy reward of
    each group's prompt (group id -> reward); sampling metrics.

    DAPO dynamic sampling (algo.dynamic_sampling) drops the groups whose rewards are all equal
    (zero advantage: no signal, only a smaller gradient) and samples fresh prompts for the missing
    groups, at most algo.max_sampling_tries rounds in all. At the cap the batch keeps the groups it
    has; if it has none, the last round trains as it is.
    """
    algo, want = config.algo, config.rollout.prompts_per_step
    kept: list[Trajectory] = []
    greedy: dict[str, float] = {}
    rounds = dropped = 0
    while True:
        tasks = c.stream.next(want - len({t.group_id for t in kept}))
        prefix = f"{step}/" if rounds == 0 else f"{step}.{rounds}/"
        params = sampling_for_step(config, step, c.stop_token_ids, rounds)
        batch = rollout(c.engine, c.tokenizer, c.family, tasks, config.rollout.n, params, prefix, config.rollout.truncated_reward)
        if algo.advantage == "remax":
            greedy |= greedy_rewards(c, config, tasks, prefix)
        rounds += 1
        if not algo.dynamic_sampling:
            return batch, greedy or None, greedy_metrics(greedy)
        keep = informative_groups(config, batch)
        kept += [t for t, k in zip(batch, keep) if k]
        dropped += len({t.group_id for t, k in zip(batch, keep) if not k})
        if len({t.group_id for t in kept}) >= want or rounds >= algo.max_sampling_tries:
            break
    metrics = {"rollout/sampling_rounds": float(rounds), "rollout/dropped_groups": float(dropped)}
    return kept or batch, greedy or None, metrics | greedy_metrics(greedy)


def informative_groups(config: RunConfig, batch: list[Trajectory]) -> list[bool]:
    """Per trajectory: does its group have rewards that differ? Decided on the valid members only
    (infra failures leave their group first); a group with no valid member is dropped."""
    rewards = training_rewards(config, batch)
    valid = [i for i, t in enumerate(batch) if not t.infra_error]
    keep_valid = dynamic_sampling_keep([rewards[i] for i in valid], [batch[i].group_id for i in valid])
    informative = {batch[i].group_id for i, keep in zip(valid, keep_valid) if keep}
    return [t.group_id in informative for t in batch]


def greedy_rewards(c: Components, config: RunConfig, tasks: list[Task], prefix: str) -> dict[str, float]:
    """ReMax's baseline: the training reward of one greedy decode of each prompt, keyed by the
    group id its samples carry (same prefix, same position). A greedy decode whose grader
    crashed counts 0."""
    r = config.rollout
    params = SamplingParams(temperature=0.0, max_new_tokens=r.max_new_tokens, stop_token_ids=c.stop_token_ids)
    decoded = rollout(c.engine, c.tokenizer, c.family, tasks, 1, params, prefix, r.truncated_reward)
    return {t.group_id: 0.0 if t.infra_error else reward for t, reward in zip(decoded, training_rewards(config, decoded))}


def greedy_metrics(greedy: dict[str, float]) -> dict[str, float]:
    return {"reward/greedy_baseline": statistics.fmean(greedy.values())} if greedy else {}


def training_rewards(config: RunConfig, batch: list[Trajectory]) -> list[float]:
    """The verifier's rewards plus, with algo.soft_overlong, DAPO's length penalty (Eq. 13)."""
    rewards = [t.reward for t in batch]
    if not config.algo.soft_overlong:
        return rewards
    max_len, cache_len = soft_overlong_lengths(config)
    penalties = soft_overlong_penalty([t.num_sampled_tokens for t in batch], max_len, cache_len)
    return [reward + penalty for reward, penalty in zip(rewards, penalties)]


@dataclass(frozen=True)
class TrainTargets:
    """What `compute_advantages` hands the learner, one entry per trajectory of the batch."""

    advantages: list[float | torch.Tensor]  # a float per sequence, or a (L_i,) tensor per sampled token
    returns: list[torch.Tensor] | None = None  # (L_i,) the critic's value targets (GAE); None without a critic
    metrics: dict[str, float] = field(default_factory=dict)  # reward/kl_penalty, reward/overlong_penalty ...


def compute_advantages(
    config: RunConfig, batch: list[Trajectory], scores: TokenScores | None = None, greedy: dict[str, float] | None = None,
) -> TrainTargets:
    """Advantages by algo.advantage. Infra-failed episodes leave their group first: they are not
    the policy's fault, and get advantage 0. `scores` (the learner's no-grad pass) gives the KL
    penalty and the critic's values; `greedy` (group id -> greedy reward) is ReMax's baseline."""
    algo = config.algo
    valid = [i for i, t in enumerate(batch) if not t.infra_error]
    advantages: list[float | torch.Tensor] = [0.0] * len(batch)
    if not valid:  # nothing to learn from; a critic still gets (unused) targets
        return TrainTargets(advantages, [torch.zeros(t.num_sampled_tokens) for t in batch] if algo.advantage == "gae" else None)
    rewards = training_rewards(config, batch)
    metrics = {"reward/overlong_penalty": statistics.fmean(rewards[i] - batch[i].reward for i in valid)} if algo.soft_overlong else {}
    rewards_V = torch.tensor([rewards[i] for i in valid], dtype=torch.float32)
    groups_V = [batch[i].group_id for i in valid]
    if algo.advantage == "grpo":
        per_sequence_V = grpo(rewards_V, groups_V, std_normalize=algo.std_normalize)
    elif algo.advantage == "dr_grpo":
        per_sequence_V = dr_grpo(rewards_V, groups_V)
    elif algo.advantage == "rloo":
        per_sequence_V = rloo(rewards_V, groups_V)
    elif algo.advantage == "remax":
        if greedy is None:
            raise ValueError("advantage remax needs the greedy decode's reward of each group (sample_batch returns them)")
        per_sequence_V = remax(rewards_V, torch.tensor([greedy[g] for g in groups_V]))
    else:
        targets = token_level_advantages(config, batch, valid, rewards_V, scores)
        return TrainTargets(targets.advantages, targets.returns, metrics | targets.metrics)
    for i, value in zip(valid, per_sequence_V.tolist()):
        advantages[i] = value
    return TrainTargets(advantages, None, metrics)


def token_level_advantages(
    config: RunConfig, batch: list[Trajectory], valid: list[int], rewards_V: torch.Tensor, scores: TokenScores | None,
) -> TrainTargets:
    """The estimators with time structure, on right-padded (valid sequences, tokens) tensors."""
    algo = config.algo
    lengths = [batch[i].num_sampled_tokens for i in valid]
    mask_VT = pad([torch.ones(n) for n in lengths])
    kl_VT, metrics = kl_penalty(config, batch, valid, scores)
    beta = algo.kl_coef if algo.kl_in_reward else 0.0
    returns_VT = None
    if algo.advantage == "reinforce_pp_baseline":
        advantages_VT = reinforce_pp_baseline(rewards_V, [batch[i].group_id for i in valid], mask_VT)
    elif algo.advantage == "reinforce_pp":
        advantages_VT = reinforce_pp(rewards_V, kl_VT, mask_VT, beta, algo.gamma)
    elif algo.advantage == "gae":
        if scores is None or scores.values is None:
            raise ValueError("advantage gae needs the critic's values: pass scores=learner.score(batch)")
        values_VT = pad([scores.values[i] for i in valid])
        token_rewards_VT = kl_token_rewards(rewards_V, kl_VT, mask_VT, beta)
        raw_VT, returns_VT = gae(token_rewards_VT, values_VT, mask_VT, algo.gamma, algo.lam)
        advantages_VT = whiten(raw_VT, mask_VT)  # A is whitened; the value targets are not
    else:
        raise ValueError(f"unknown advantage estimator {algo.advantage!r}")
    advantages: list[float | torch.Tensor] = [torch.zeros(t.num_sampled_tokens) for t in batch]
    returns = [torch.zeros(t.num_sampled_tokens) for t in batch] if returns_VT is not None else None
    for row, (i, length) in enumerate(zip(valid, lengths)):
        advantages[i] = advantages_VT[row, :length]
        if returns is not None:
            returns[i] = returns_VT[row, :length]
    return TrainTargets(advantages, returns, metrics)


def kl_penalty(config: RunConfig, batch: list[Trajectory], valid: list[int], scores: TokenScores | None) -> tuple[torch.Tensor, dict[str, float]]:
    """(V, T) kl_t between the sampling policy (the trainer's recompute when there is one, else the
    engine's logprobs) and the reference, for KL in the reward; zeros when that is off."""
    algo = config.algo
    lengths = [batch[i].num_sampled_tokens for i in valid]
    if not (algo.kl_in_reward and algo.kl_coef > 0):
        return pad([torch.zeros(n) for n in lengths]), {}
    if scores is None or scores.reference_logprobs is None:
        raise ValueError("algo.kl_in_reward needs the reference logprobs: pass scores=learner.score(batch)")
    kl_V = []
    for i in valid:
        old_T = scores.old_logprobs[i] if scores.old_logprobs is not None else sampled_behaviour_logprobs(batch[i])
        kl_V.append(kl_estimate(old_T.cpu(), scores.reference_logprobs[i].cpu(), algo.kl_estimator))
    flat = torch.cat(kl_V)
    return pad(kl_V), {"reward/kl_penalty": algo.kl_coef * float(flat.mean()) if len(flat) else 0.0}


def pad(rows: list[torch.Tensor]) -> torch.Tensor:
    """(V, T) float32, right-padded with 0."""
    return torch.nn.utils.rnn.pad_sequence([row.detach().float().cpu() for row in rows], batch_first=True)


def rollout_metrics(batch: list[Trajectory]) -> dict[str, float]:
    rewards = [t.reward for t in batch if not t.infra_error]
    lengths = [t.num_sampled_tokens for t in batch]
    return {
        "reward/mean": statistics.fmean(rewards) if rewards else 0.0,
        "reward/std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "reward/pass_rate": sum(r >= 1.0 for r in rewards) / max(1, len(rewards)),
        "rollout/response_tokens": statistics.fmean(lengths),
        "rollout/truncated_fraction": sum(t.finish_reason == "length" for t in batch) / len(batch),
        "rollout/infra_errors": float(sum(t.infra_error for t in batch)),
    }


def run_eval(c: Components, config: RunConfig, logger: MetricsLogger | None, label: str) -> float:
    started = time.perf_counter()
    result = evaluate(c.engine, c.tokenizer, c.family, c.eval_tasks, config.eval.max_new_tokens or config.rollout.max_new_tokens,
                      c.stop_token_ids, config.eval.batch_size)
    message = f"[rlyard] {label} held-out greedy accuracy: {result['accuracy']:.1%} on {len(c.eval_tasks)} tasks ({time.perf_counter() - started:.0f} s)"
    (logger.write if logger else print)(message)
    return result["accuracy"]


def train(config: RunConfig, run_dir: Path, resume: bool = False) -> RunResult:
    wall_started = time.perf_counter()
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / "config.yaml", dump_config(config).encode())
    c = build(config)
    start_step, base_accuracy, train_seconds = 0, None, 0.0
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:
        print(f"[rlyard] no checkpoint in {run_dir}; starting from step 0")
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, c.model, c.learner.optimizer, c.learner.critic)
        c.stream.load_state_dict(state["stream"])
        start_step, base_accuracy, train_seconds = state["step"], state.get("base_accuracy"), state.get("train_seconds", 0.0)
        push_weights(c, state["policy_version"])
        print(f"[rlyard] resumed from {checkpoint} at step {start_step}")
    store = TrajectoryStore(run_dir / "trajectories.jsonl")
    store.truncate_after(start_step)
    with MetricsLogger(run_dir, config.train.steps, start_step, config.output.tensorboard, config.output.wandb,
                       config.output.wandb_project, config.model_dump(mode="json"), config.output.progress) as logger:
        if c.eval_tasks and config.eval.at_start and base_accuracy is None:
            base_accuracy = run_eval(c, config, logger, "base model")
            logger.log(0, {"eval/accuracy": base_accuracy})
        for step in range(start_step, config.train.steps):
            step_started = time.perf_counter()
            # 1. sample n completions for each prompt with the current weights
            gen_started = time.perf_counter()
            batch, greedy, sampling_metrics = sample_batch(c, config, step)
            gen_seconds = time.perf_counter() - gen_started
            # 2. score -> advantages -> one learner step -> new policy version
            scores = c.learner.score(batch)  # a no-op unless TIS, KL in the reward or a critic needs it
            targets = compute_advantages(config, batch, scores, greedy)
            metrics = rollout_metrics(batch) | sampling_metrics | targets.metrics
            metrics |= c.learner.train_step(batch, targets.advantages, step, scores, targets.returns)
            push_weights(c, step + 1)
            step_seconds = time.perf_counter() - step_started
            train_seconds += step_seconds
            sampled = sum(t.num_sampled_tokens for t in batch)
            metrics |= {"time/step": step_seconds, "time/generate": gen_seconds,
                        "time/generate_tokens_per_s": sampled / gen_seconds, "progress/samples": (step + 1) * len(batch)}
            # 3. record, evaluate, checkpoint
            if config.eval.every and (step + 1) % config.eval.every == 0 and step + 1 < config.train.steps:
                metrics["eval/accuracy"] = run_eval(c, config, logger, f"step {step + 1}")
            logger.log(step + 1, metrics)
            store.append(step + 1, [trajectory_row(t, _prompt_text(c, t)) for t in batch])
            last = step + 1 == config.train.steps
            if (config.output.checkpoint_every and (step + 1) % config.output.checkpoint_every == 0) or last:
                save_checkpoint(run_dir, step + 1, c.model, c.learner.optimizer, {
                    "stream": c.stream.state_dict(), "policy_version": c.engine.policy_version,
                    "base_accuracy": base_accuracy, "train_seconds": train_seconds,
                }, keep=config.output.keep_checkpoints, critic=c.learner.critic)
        final_accuracy = run_eval(c, config, logger, "final model") if c.eval_tasks and config.eval.at_end else None
        if final_accuracy is not None:
            logger.log(config.train.steps, {"eval/accuracy": final_accuracy})
    if config.output.plot:
        plot_reward_curve(run_dir / "metrics.jsonl", run_dir / "reward_curve.png")
    return RunResult(run_dir, config.train.steps, base_accuracy, final_accuracy, train_seconds, time.perf_counter() - wall_started)


def _prompt_text(c: Components, traj: Trajectory) -> str:
    return c.tokenizer.decode(traj.token_ids[: traj.prompt_length], skip_special_tokens=False)
