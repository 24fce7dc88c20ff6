"""The synchronous loop: sample a batch, score it, train on it, push weights, repeat.

prompts -> n rollouts per prompt -> verify -> advantages -> PPO epochs -> update_weights.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from rlyard.algos import grpo
from rlyard.config import RunConfig, dump_config
from rlyard.observe import MetricsLogger, TrajectoryStore, plot_reward_curve, trajectory_row
from rlyard.observe.store import write_atomic
from rlyard.orchestrate.evaluate import evaluate
from rlyard.orchestrate.rollout import rollout
from rlyard.orchestrate.setup import Components, build, push_weights
from rlyard.train import latest_checkpoint, load_checkpoint, save_checkpoint
from rlyard.types import SamplingParams, Trajectory


@dataclass
class RunResult:
    run_dir: Path
    steps: int
    base_accuracy: float | None
    final_accuracy: float | None
    train_seconds: float
    wall_seconds: float


def sampling_for_step(config: RunConfig, step: int, stop_ids: tuple[int, ...]) -> SamplingParams:
    """Seeded by (seed, step) alone, so a resumed run samples exactly what the original would."""
    r = config.rollout
    return SamplingParams(r.temperature, r.top_p, r.top_k, r.max_new_tokens, stop_ids, seed=config.train.seed * 1_000_003 + step)


def compute_advantages(config: RunConfig, batch: list[Trajectory]) -> list[float]:
    """Infra-failed episodes leave their group first: they are not the policy's fault."""
    valid = [i for i, t in enumerate(batch) if not t.infra_error]
    advantages = [0.0] * len(batch)
    if valid:
        rewards = torch.tensor([batch[i].reward for i in valid], dtype=torch.float32)
        values = grpo(rewards, [batch[i].group_id for i in valid], std_normalize=config.algo.std_normalize)
        for i, value in zip(valid, values.tolist()):
            advantages[i] = value
    return advantages


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
        state = load_checkpoint(checkpoint, c.model, c.learner.optimizer)
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
        for step in range(start_step, config.train.steps):
            step_started = time.perf_counter()
            # 1. sample n completions for each prompt with the current weights
            tasks = c.stream.next(config.rollout.prompts_per_step)
            gen_started = time.perf_counter()
            batch = rollout(c.engine, c.tokenizer, c.family, tasks, config.rollout.n, sampling_for_step(config, step, c.stop_token_ids), f"{step}/",
                            config.rollout.truncated_reward)
            gen_seconds = time.perf_counter() - gen_started
            # 2. score -> advantages -> one learner step -> new policy version
            advantages = compute_advantages(config, batch)
            metrics = rollout_metrics(batch) | c.learner.train_step(batch, advantages, step)
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
                }, keep=config.output.keep_checkpoints)
        final_accuracy = run_eval(c, config, logger, "final model") if c.eval_tasks and config.eval.at_end else None
        if final_accuracy is not None:
            logger.log(config.train.steps, {"eval/accuracy": final_accuracy})
    if config.output.plot:
        plot_reward_curve(run_dir / "metrics.jsonl", run_dir / "reward_curve.png")
    return RunResult(run_dir, config.train.steps, base_accuracy, final_accuracy, train_seconds, time.perf_counter() - wall_started)


def _prompt_text(c: Components, traj: Trajectory) -> str:
    return c.tokenizer.decode(traj.token_ids[: traj.prompt_length], skip_special_tokens=False)
