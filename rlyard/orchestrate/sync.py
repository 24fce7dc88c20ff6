"""The synchronous loop: sample a batch, score it, train on it, push weights, repeat.

prompts -> n rollouts per prompt -> verify -> advantages -> PPO epochs -> update_weights.
The algorithm's extra steps plug in around it: DAPO's dynamic sampling and ReMax's greedy
baseline in `sampling.sample_batch`, the learner's no-grad pass (TIS, KL in the reward, the
critic's values) before `targets.compute_advantages`, which dispatches on `algo.advantage`.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from rlyard.config import RunConfig, dump_config
from rlyard.observe import MetricsLogger, TrajectoryStore, plot_reward_curve, trajectory_row
from rlyard.observe.store import write_atomic
from rlyard.orchestrate.evaluate import evaluate
from rlyard.orchestrate.sampling import agent_limits, sample_batch
from rlyard.orchestrate.setup import Components, build, push_weights
from rlyard.orchestrate.targets import compute_advantages
from rlyard.train import latest_checkpoint, load_checkpoint, save_checkpoint
from rlyard.types import Trajectory


@dataclass
class RunResult:
    run_dir: Path
    steps: int
    base_accuracy: float | None
    final_accuracy: float | None
    train_seconds: float
    wall_seconds: float


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
        "rollout/turns": statistics.fmean(t.turns for t in batch),
    } | component_means(batch)


def component_means(batch: list[Trajectory]) -> dict[str, float]:
    """Each reward component's batch mean (e.g. malformed tool calls per episode), as reward/<name>."""
    valid = [t for t in batch if not t.infra_error]
    names = sorted({name for t in valid for name in t.components})
    return {f"reward/{name}": statistics.fmean(t.components.get(name, 0.0) for t in valid) for name in names} if valid else {}


def run_eval(c: Components, config: RunConfig, logger: MetricsLogger | None, label: str) -> float:
    started = time.perf_counter()
    result = evaluate(c.engine, c.tokenizer, c.family, c.eval_tasks, config.eval.max_new_tokens or config.rollout.max_new_tokens,
                      c.stop_token_ids, config.eval.batch_size, limits=agent_limits(config))
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
