"""What the sync and the async loop share: the run folder, resume, logging, evaluation, and
recording a finished step (metrics, trajectories, checkpoint).

A loop opens a `Run`, trains steps `run.start_step .. train.steps - 1`, hands each finished step
to `run.record`, and returns `run.result` after the `with` block (final evaluation, plot).
Resume takes the newest checkpoint that passes its checksums (rlyard/train/checkpoint.py) and
cuts trajectories.jsonl and dropped.jsonl back to its step; docs/reliability.md.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any
from pathlib import Path

from rlyard.algos.filters import is_truncated
from rlyard.config import RunConfig, dump_config
from rlyard.observe import MetricsLogger, TrajectoryStore, plot_reward_curve, trajectory_row
from rlyard.observe.store import prompt_text, write_atomic
from rlyard.orchestrate.evaluate import evaluate
from rlyard.orchestrate.sampling import agent_limits
from rlyard.orchestrate.setup import Components, build, push_weights
from rlyard.testing.kill import kill_point
from rlyard.train import latest_checkpoint, load_checkpoint, save_checkpoint
from rlyard.types import RunResult, Trajectory


DROPPED_FILE = "dropped.jsonl"  # async: every episode of a group the learner dropped, with the reason


def rollout_metrics(batch: list[Trajectory]) -> dict[str, float]:
    rewards = [t.reward for t in batch if not t.infra_error]
    lengths = [t.num_sampled_tokens for t in batch]
    return {
        "reward/mean": statistics.fmean(rewards) if rewards else 0.0,
        "reward/std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "reward/pass_rate": sum(r >= 1.0 for r in rewards) / max(1, len(rewards)),
        "rollout/response_tokens": statistics.fmean(lengths),
        "rollout/truncated_fraction": sum(is_truncated(t.finish_reason) for t in batch) / len(batch),
        "rollout/infra_errors": float(sum(t.infra_error for t in batch)),
        # episodes a grader scored 0 because the policy's output made it fail (rlyard/environment/outcomes.py)
        "rollout/policy_input_errors": float(sum(bool(t.components.get("policy_input")) for t in batch)),
        "rollout/turns": statistics.fmean(t.turns for t in batch),
        # tokens of greedy (T = 0) harness turns: recorded, left out of the policy loss
        "rollout/greedy_tokens": statistics.fmean(sum(1 for x in t.temperatures or () if x == 0) for t in batch),
    } | component_means(batch)


def component_means(batch: list[Trajectory]) -> dict[str, float]:
    """Each reward component's batch mean (e.g. malformed tool calls per episode), as reward/<name>."""
    valid = [t for t in batch if not t.infra_error]
    names = sorted({name for t in valid for name in t.components})
    # over the samples that have the component: a reward function's None (not applicable) is not a 0
    return {f"reward/{name}": statistics.fmean(t.components[name] for t in valid if name in t.components) for name in names}


def run_eval(c: Components, config: RunConfig, logger: MetricsLogger | None, label: str) -> dict[str, float]:
    """Greedy held-out accuracy and mean reward (`eval/accuracy`, `eval/mean_reward`), said on one line."""
    started = time.perf_counter()
    result = evaluate(c.engine, c.tokenizer, c.family, c.eval_tasks, config.eval.max_new_tokens or config.rollout.max_new_tokens,
                      c.stop_token_ids, config.eval.batch_size, limits=agent_limits(config))
    message = (f"[rlyard] {label} held-out greedy accuracy: {result['accuracy']:.1%} (mean reward {result['mean_reward']:.3f}) "
               f"on {len(c.eval_tasks)} tasks ({time.perf_counter() - started:.0f} s)")
    (logger.write if logger else print)(message)
    return {"eval/accuracy": result["accuracy"], "eval/mean_reward": result["mean_reward"]}


class Run:
    """One training run's bookkeeping; the loop itself only samples and trains."""

    def __init__(self, config: RunConfig, run_dir: Path, resume: bool = False, engine=None, followers: list = ()):
        self.config, self.run_dir, self.wall_started = config, run_dir, time.perf_counter()
        run_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(run_dir / "config.yaml", dump_config(config).encode())
        # families write artefacts under the run folder (webdev: screenshots/): each task carries it, no
        # process-global variable, so two runs in one process keep their own (setup.with_run_dir)
        self.c = c = build(config, engine=engine, shard=bool(followers), followers=followers, run_dir=run_dir)
        self.start_step, self.base_accuracy, self.train_seconds = 0, None, 0.0
        self.final_accuracy: float | None = None
        self.resumed_state: dict[str, Any] = {}  # the checkpoint's saved state, when resumed
        # the loop's own state for each checkpoint (async: the task source's pending tickets)
        self.checkpoint_state: Callable[[], dict[str, Any]] | None = None
        checkpoint = latest_checkpoint(run_dir) if resume else None  # the newest that passes its checksums
        if resume and checkpoint is None:
            print(f"[rlyard] no checkpoint in {run_dir}; starting from step 0")
        if checkpoint is not None:
            if hasattr(c.learner, "load_checkpoint"):  # a learner over several ranks: all of them load
                state = c.learner.load_checkpoint(checkpoint)
            else:
                state = load_checkpoint(checkpoint, c.model, c.learner.optimizer, c.learner.critic)
            c.stream.load_state_dict(state["stream"])
            self.resumed_state = state
            self.start_step, self.base_accuracy = state["step"], state.get("base_accuracy")
            self.train_seconds = state.get("train_seconds", 0.0)
            push_weights(c, state["policy_version"])
            print(f"[rlyard] resumed from {checkpoint} at step {self.start_step}")
        self.store = TrajectoryStore(run_dir / "trajectories.jsonl")
        self.store.truncate_after(self.start_step)
        self.dropped_store = TrajectoryStore(run_dir / DROPPED_FILE)  # async: groups dropped, not trained
        self.dropped_store.truncate_after(self.start_step)
        output = config.output
        self.logger = MetricsLogger(run_dir, config.train.steps, self.start_step, output.tensorboard, output.wandb,
                                    output.wandb_project, config.model_dump(mode="json"), output.progress,
                                    mlflow=output.mlflow, mlflow_tracking_uri=output.mlflow_tracking_uri,
                                    mlflow_experiment=output.mlflow_experiment)

    def __enter__(self) -> "Run":
        try:
            if self.c.eval_tasks and self.config.eval.at_start and self.base_accuracy is None:
                held_out = run_eval(self.c, self.config, self.logger, "base model")
                self.base_accuracy = held_out["eval/accuracy"]
                self.logger.log(0, held_out)
        except BaseException:
            self.logger.close()
            raise
        return self

    def record(self, step: int, batch: list[Trajectory], metrics: dict[str, float], step_seconds: float,
               extra: list[dict] | None = None, advantages: list | None = None) -> None:
        """Step `step` (1-based) is trained: evaluate if due, log, store its trajectories (each row
        merged with `extra[i]` when given, with its advantage: a token-level one as its mean),
        checkpoint if due or last."""
        config, c = self.config, self.c
        self.train_seconds += step_seconds
        if hasattr(c.engine, "metrics"):  # e.g. the Ray fleet's actor restarts
            metrics |= c.engine.metrics()
        if config.eval.every and step % config.eval.every == 0 and step < config.train.steps:
            metrics |= run_eval(c, config, self.logger, f"step {step}")
        self.logger.log(step, metrics)
        means = [None if a is None else float(a) if isinstance(a, (int, float)) else float(a.float().mean()) if a.numel() else 0.0
                 for a in (advantages or [None] * len(batch))]
        rows = [trajectory_row(t, self.prompt_text(t), tokenizer=c.tokenizer, advantage=a) for t, a in zip(batch, means)]
        self.store.append(step, [row | more for row, more in zip(rows, extra)] if extra else rows)
        kill_point("logged")
        if (config.output.checkpoint_every and step % config.output.checkpoint_every == 0) or step == config.train.steps:
            # a learner over several ranks gathers its sharded state on this one first
            gathered = c.learner.gather_checkpoint(config.model.lora.enabled) if hasattr(c.learner, "gather_checkpoint") else None
            state = {"stream": c.stream.state_dict(), "policy_version": c.engine.policy_version,
                     "base_accuracy": self.base_accuracy, "train_seconds": self.train_seconds}
            save_checkpoint(self.run_dir, step, c.model, c.learner.optimizer, state | (self.checkpoint_state() if self.checkpoint_state else {}),
                            keep=config.output.keep_checkpoints, critic=c.learner.critic, gathered=gathered)
            kill_point("after_checkpoint")

    def record_dropped(self, step: int, dropped: list) -> None:
        """Groups dropped while collecting step `step` ((group, reason) pairs: stale, all_infra,
        uninformative), to dropped.jsonl, each row with its "dropped" reason."""
        rows = [trajectory_row(t, self.prompt_text(t)) | {"dropped": reason} for group, reason in dropped for t in group.trajectories]
        self.dropped_store.append(step, rows)

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None and self.c.eval_tasks and self.config.eval.at_end:
                held_out = run_eval(self.c, self.config, self.logger, "final model")
                self.final_accuracy = held_out["eval/accuracy"]
                self.logger.log(self.config.train.steps, held_out)
        finally:
            self.logger.close()
        if exc_type is None and self.config.output.plot:
            plot_reward_curve(self.run_dir / "metrics.jsonl", self.run_dir / "reward_curve.png")

    @property
    def result(self) -> RunResult:
        return RunResult(self.run_dir, self.config.train.steps, self.base_accuracy, self.final_accuracy, self.train_seconds,
                         time.perf_counter() - self.wall_started)

    def prompt_text(self, traj: Trajectory) -> str:
        return prompt_text(traj, self.c.tokenizer)
