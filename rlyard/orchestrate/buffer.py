"""What flows between the rollout threads and the learner in async mode: tickets (a task handed
to a worker), groups (its n finished samples) and the task source that hands out tickets.

The task source is also where staleness_policy=wait holds producers back: at most
(max_staleness + 1) x prompts_per_step groups may be outstanding (handed out and neither trained
nor dropped yet), AReaL's bound on how far generation may run ahead of training. Every group the
learner drops (too stale, all failed, rejected by dynamic sampling) must be settled as soon as
it is dropped: a dropped group that kept its slot would hold the producers back for nothing.
Settling is idempotent per ticket, so a rejected group that a step trains after all (dynamic
sampling's fallback) is not counted twice.

A checkpoint holds the source's `state_dict`: the stream position, the next ticket number and
every task handed out or re-queued but not yet trained (in the buffer, in a worker's hands, in
the re-queue). A resumed run plays those first, so a kill loses no queued task and, since the
checkpoint's weights hold exactly the groups trained before it, trains none twice.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from rlyard.data import TaskStream
from rlyard.types import Task, Trajectory


@dataclass(frozen=True)
class Ticket:
    """One task handed to a rollout worker."""

    seq: int  # group number in this run: seeds the group's sampling and names its group ids
    task: Task
    version: int  # the learner's policy version when the task was handed out


@dataclass
class Group:
    """The n samples of one task, complete, as a worker puts them in the buffer."""

    ticket: Ticket
    trajectories: list[Trajectory]
    greedy: dict[str, float] = field(default_factory=dict)  # ReMax: group id -> greedy reward; else empty

    @property
    def min_version(self) -> int:
        """The oldest policy version that sampled any of its tokens (what staleness is measured on)."""
        versions = [v for t in self.trajectories for v, m in zip(t.policy_versions, t.loss_mask) if m]
        return min(versions) if versions else self.ticket.version


class TaskSource:
    """Thread-safe tickets: re-queued tasks first, then the run's task stream."""

    def __init__(self, stream: TaskStream, first_seq: int, version: int, limit: int | None = None):
        self._cond = threading.Condition()
        self._stream, self._requeued = stream, deque()
        self._seq, self._version, self._limit = first_seq, version, limit
        self._outstanding: dict[int, Ticket] = {}  # every ticket handed out and not yet settled, by seq
        self.requeued_total = 0
        self.closed = False

    def take(self) -> Ticket | None:
        """The next ticket; blocks while the wait policy's limit is reached; None once closed."""
        with self._cond:
            while not self.closed and self._limit is not None and len(self._outstanding) >= self._limit:
                self._cond.wait()
            if self.closed:
                return None
            task = self._requeued.popleft() if self._requeued else self._stream.next(1)[0]
            ticket = Ticket(self._seq, task, self._version)
            self._seq += 1
            self._outstanding[ticket.seq] = ticket
            return ticket

    @property
    def outstanding(self) -> int:
        """Tickets handed out and not yet settled (what the wait policy's limit counts)."""
        with self._cond:
            return len(self._outstanding)

    @property
    def limit(self) -> int | None:
        return self._limit

    def settle(self, tickets: list[Ticket], requeue: bool = False) -> None:
        """These tickets were trained on or dropped: their slots are free. With `requeue` their
        tasks are played again (first). A ticket already settled is ignored (not re-queued twice)."""
        with self._cond:
            fresh = [t for t in tickets if t.seq in self._outstanding]
            for ticket in fresh:
                del self._outstanding[ticket.seq]
            if requeue:
                self._requeued.extendleft(reversed([t.task for t in fresh]))
                self.requeued_total += len(fresh)
            self._cond.notify_all()

    def state_dict(self) -> dict:
        """The stream position, the next ticket number and the untrained tasks (re-queued first,
        then those handed out, by ticket), taken together under the lock."""
        with self._cond:
            pending = [task.id for task in self._requeued] + [self._outstanding[seq].task.id for seq in sorted(self._outstanding)]
            return {"stream": self._stream.state_dict(), "next_seq": self._seq, "pending_tasks": pending}

    def load_state_dict(self, state: dict) -> None:
        """Resume: the stream's position (loaded by the run) stays; the pending tasks go first."""
        by_id = {task.id: task for task in reversed(self._stream.tasks)}
        missing = [task_id for task_id in state["pending_tasks"] if task_id not in by_id]
        if missing:
            raise ValueError(f"the checkpoint's pending tasks {missing[:5]} are not among this run's tasks; "
                             "resume with the same env settings")
        with self._cond:
            self._requeued = deque(by_id[task_id] for task_id in state["pending_tasks"])
            self._seq = state["next_seq"]

    def set_version(self, version: int) -> None:
        with self._cond:
            self._version = version

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()
