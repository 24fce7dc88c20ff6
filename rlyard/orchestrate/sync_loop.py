"""The synchronous loop: sample a batch, score it, train on it, push weights, repeat.

prompts -> n rollouts per prompt -> verify -> advantages -> PPO epochs -> update_weights.
The algorithm's extra steps plug in around it: DAPO's dynamic sampling and ReMax's greedy
baseline in `sampling.sample_batch`, the learner's no-grad pass (TIS, KL in the reward, the
critic's values) before `targets.compute_advantages`, which dispatches on `algo.advantage`.
Runs start from `rlyard.orchestrate.entry.train`, which picks this loop, the async one or the Ray backend.
"""
from __future__ import annotations

import time
from pathlib import Path

from rlyard.config import RunConfig
from rlyard.orchestrate.run import Run, RunResult, rollout_metrics
from rlyard.orchestrate.sampling import sample_batch
from rlyard.orchestrate.setup import push_weights
from rlyard.orchestrate.targets import compute_advantages


def train_sync(config: RunConfig, run_dir: Path, resume: bool = False, engine=None, followers: list = ()) -> RunResult:
    """`engine`: one built elsewhere (the Ray backend's fleet of rollout actors), else the config's;
    `followers`: the other ranks of a learner over several Ray actors (ray_learners.py)."""
    with Run(config, run_dir, resume, engine, followers) as run:
        c = run.c
        for step in range(run.start_step, config.train.steps):
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
            sampled = sum(t.num_sampled_tokens for t in batch)
            metrics |= {"time/step": step_seconds, "time/generate": gen_seconds,
                        "time/generate_tokens_per_s": sampled / gen_seconds, "progress/samples": (step + 1) * len(batch)}
            # 3. record, evaluate, checkpoint
            run.record(step + 1, batch, metrics, step_seconds, advantages=targets.advantages)
    return run.result
