"""Where every run starts, whatever its mode: `train` picks the loop (`orchestrate.mode`) and where
its parts run (`orchestrate.backend`). `rlyard train` and the Python API both call it.

sync (rlyard/orchestrate/sync_loop.py): sample a batch, score it, train on it, push weights.
async (rlyard/orchestrate/async_loop.py): rollout threads fill a buffer while the learner trains.
backend=ray (rlyard/orchestrate/ray_backend.py): the same loop in a learner actor, rollouts and
graders in their own actors.
"""
from __future__ import annotations

from pathlib import Path

from rlyard.config import RunConfig
from rlyard.types import RunResult  # a Ray driver only launches actors: nothing here imports torch


def train(config: RunConfig, run_dir: Path, resume: bool = False) -> RunResult:
    if config.orchestrate.backend == "ray":
        from rlyard.orchestrate.ray_backend import train_on_ray

        return train_on_ray(config, run_dir, resume)
    if config.orchestrate.mode == "async":
        from rlyard.orchestrate.async_loop import train_async

        return train_async(config, run_dir, resume)
    from rlyard.orchestrate.sync_loop import train_sync

    return train_sync(config, run_dir, resume)
