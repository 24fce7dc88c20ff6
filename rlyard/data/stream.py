"""A resumable, endless stream of tasks: a fresh permutation every epoch, seeded.

Its whole state is one integer (tasks handed out so far), so a checkpoint can store it and a
resumed run draws exactly the batch the uninterrupted run would have drawn.
"""
from __future__ import annotations

import random

from rlyard.types import Task


class TaskStream:
    def __init__(self, tasks: list[Task], seed: int = 0, position: int = 0):
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

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "seed": self.seed, "size": len(self.tasks)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["size"] != len(self.tasks) or state["seed"] != self.seed:
            raise ValueError(
                f"the checkpoint's task stream (size {state['size']}, seed {state['seed']}) does not match "
                f"this run's (size {len(self.tasks)}, seed {self.seed}); resume with the same env settings"
            )
        self.position = state["position"]
