"""A resumable, endless stream of tasks: a fresh permutation every epoch, seeded.

Its whole state is one integer (tasks handed out so far), so a checkpoint can store it and a
resumed run draws exactly the batch the uninterrupted run would have drawn.
"""
from __future__ import annotations

import random
from typing import Any

from rlyard.types import Task


def stream_seed(env_seed: int, train_seed: int) -> int | str:
    """The train stream's seed: `train.seed` changes the order tasks come in, so runs that differ
    only in it (RL seeds side by side) see different tasks, while `env.seed` alone fixes which
    tasks exist and the held-out set. train.seed 0 keeps env.seed's order, as before."""
    return env_seed if train_seed == 0 else f"{env_seed}+{train_seed}"


class TaskStream:
    def __init__(self, tasks: list[Task], seed: int | str = 0, position: int = 0):
        if not tasks:
            raise ValueError("a task stream needs at least one task")
        self.tasks, self.seed, self.position = tasks, seed, position
        self._epoch, self._order = -1, []

    def _order_for(self, epoch: int) -> list[int]:
        if epoch != self._epoch:
            self._order = list(range(len(self.tasks)))
            random.Random(f"{self.seed}/{epoch}").shuffle(self._order)
            self._epoch = epoch
        return self._order

    def next(self, count: int) -> list[Task]:
        batch = []
        for _ in range(count):
            epoch, offset = divmod(self.position, len(self.tasks))
            batch.append(self.tasks[self._order_for(epoch)[offset]])
            self.position += 1
        return batch

    def state_dict(self) -> dict[str, int | str]:
        return {"position": self.position, "seed": self.seed, "size": len(self.tasks)}

    def load_state_dict(self, state: dict[str, int | str]) -> None:
        if state["size"] != len(self.tasks) or state["seed"] != self.seed:
            raise ValueError(
                f"the checkpoint's task stream (size {state['size']}, seed {state['seed']}) does not match "
                f"this run's (size {len(self.tasks)}, seed {self.seed}); resume with the same env settings"
            )
        self.position = state["position"]


def train_stream(tasks: list[Task], env_seed: int, train_seed: int) -> TaskStream:
    """A run's train stream: the one door for the order a run draws its tasks in, so the benches
    that feed a peer rlyard's prompts draw them exactly as the run does."""
    return TaskStream(tasks, seed=stream_seed(env_seed, train_seed))


def train_pool(family: Any, env: Any) -> list[Task]:
    """The tasks a run trains on: `env.train_size` of the family's train split at `env.seed`, with
    `env.options` (the run's `env` config section)."""
    return family.make_tasks("train", env.train_size, env.seed, **env.options)


def run_tasks(family: Any, env: Any, train_seed: int, count: int) -> list[Task]:
    """The first `count` tasks a run with this `env` section and train.seed draws, in its order:
    what a bench feeds a peer trainer so that both sides see the same prompts."""
    return train_stream(train_pool(family, env), env.seed, train_seed).next(count)
