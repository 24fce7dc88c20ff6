"""Async mode's rollout side: an engine shared by threads, and a pool of rollout workers.

Threads, not processes: the engine is torch, which releases the GIL inside its ops, and the
latency async mode hides is mostly tools and graders waiting (sleeps, subprocesses, HTTP).
Each worker takes a ticket, plays the task's whole group through the same `rollout()` as sync
mode, and puts the finished group into a bounded buffer. A worker that dies is replaced by the
learner thread (which polls the pool), and its task is played again.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
import traceback
from dataclasses import dataclass, replace

from rlyard.config import RunConfig
from rlyard.orchestrate.buffer import Group, TaskSource, Ticket
from rlyard.orchestrate.rollout import rollout
from rlyard.orchestrate.sampling import agent_limits, greedy_rewards, sampling_for_step
from rlyard.orchestrate.setup import Components


class Stopped(Exception):
    """Raised inside a worker's rollout when the pool shuts down: the episode is abandoned."""


class SharedEngine:
    """One engine for every thread. Generate calls run side by side; new weights wait for the calls
    in flight and hold back new ones (writer preference), so no forward pass sees half-copied weights.

    A multi-turn episode calls generate once per turn, so new weights land between its turns (a
    partial rollout; every token keeps the version that sampled it). `pinned()` instead holds the
    weights for a whole block (partial_rollouts=false).
    """

    def __init__(self, engine):
        self.engine = engine
        self._cond = threading.Condition()
        self._readers = self._writers_waiting = 0
        self._writing = False
        self._local = threading.local()

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    @property
    def model(self):
        return self.engine.model

    @contextlib.contextmanager
    def pinned(self):
        """Hold the current weights for the block: updates wait until it ends."""
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            with self._cond:
                while self._writing or self._writers_waiting:
                    self._cond.wait()
                self._readers += 1
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                with self._cond:
                    self._readers -= 1
                    self._cond.notify_all()

    def generate(self, prompts, params, n: int = 1):
        with self.pinned():
            return self.engine.generate(prompts, params, n)

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writing or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writing = True
        try:
            self.engine.update_weights(version, state_dict)
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class WorkerEngine:
    """What a worker's rollout sees: the shared engine, refusing new turns once the pool stops."""

    def __init__(self, shared: SharedEngine, stop: threading.Event):
        self.shared, self.stop = shared, stop

    @property
    def policy_version(self) -> int:
        return self.shared.policy_version

    def generate(self, prompts, params, n: int = 1):
        if self.stop.is_set():
            raise Stopped()
        return self.shared.generate(prompts, params, n)


@dataclass
class Worker:
    index: int
    thread: threading.Thread | None = None
    ticket: Ticket | None = None  # the task it is playing (re-queued if it dies)
    error: str = ""


class RolloutPool:
    """`orchestrate.workers` threads playing groups into a buffer of `orchestrate.buffer_groups`."""

    def __init__(self, c: Components, config: RunConfig, engine: SharedEngine, first_seq: int):
        o = config.orchestrate
        self.c, self.config, self.engine = c, config, engine
        self.stop = threading.Event()
        self.buffer: queue.Queue[Group] = queue.Queue(maxsize=o.buffer_groups or 2 * config.rollout.prompts_per_step)
        limit = (o.max_staleness + 1) * config.rollout.prompts_per_step if o.staleness_policy == "wait" else None
        self.source = TaskSource(c.stream, first_seq, engine.policy_version, limit)
        self.workers = [Worker(i) for i in range(o.workers)]
        self.restarts = 0
        self.finished_groups = 0  # groups put into the buffer so far

    def __enter__(self) -> "RolloutPool":
        for worker in self.workers:
            self._start(worker)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self, worker: Worker) -> None:
        worker.ticket, worker.error = None, ""
        # daemon: a thread stuck in a tool call can never keep the process alive after shutdown
        worker.thread = threading.Thread(target=self._work, args=(worker,), name=f"rlyard-rollout-{worker.index}", daemon=True)
        worker.thread.start()

    def _work(self, worker: Worker) -> None:
        engine = WorkerEngine(self.engine, self.stop)
        try:
            while (ticket := self.source.take()) is not None:
                worker.ticket = ticket
                group = self.play(engine, ticket)
                if not self._put(group):
                    return
                worker.ticket = None
        except Stopped:
            return
        except BaseException:  # noqa: BLE001 - recorded; the learner thread replaces this worker
            worker.error = traceback.format_exc(limit=5)

    def play(self, engine, ticket: Ticket) -> Group:
        """One group: n samples of the ticket's task, seeded by its number, as in sync mode's `rollout()`."""
        config, c = self.config, self.c
        params = sampling_for_step(config, ticket.seq, c.stop_token_ids)
        prefix = f"g{ticket.seq}/"
        pin = contextlib.nullcontext() if config.orchestrate.partial_rollouts else self.engine.pinned()
        with pin:
            trajectories = rollout(engine, c.tokenizer, c.family, [ticket.task], config.rollout.n, params, prefix,
                                   config.rollout.truncated_reward, agent_limits(config))
            greedy = greedy_rewards(replace(c, engine=engine), config, [ticket.task], prefix) if config.algo.advantage == "remax" else {}
        return Group(ticket, trajectories, greedy)

    def _put(self, group: Group) -> bool:
        while not self.stop.is_set():
            try:
                self.buffer.put(group, timeout=0.1)
                self.finished_groups += 1
                return True
            except queue.Full:
                continue
        return False

    def get(self, poll_s: float = 0.1) -> Group:
        """The next finished group; replaces dead workers while it waits."""
        while True:
            self.check_workers()
            try:
                return self.buffer.get(timeout=poll_s)
            except queue.Empty:
                continue

    def check_workers(self) -> None:
        """Replace every worker whose thread ended; its task goes back to the front of the queue."""
        for worker in self.workers:
            if worker.thread.is_alive() or self.stop.is_set():
                continue
            self.restarts += 1
            if self.restarts > self.config.orchestrate.max_worker_restarts:
                raise RuntimeError(f"rollout workers died {self.restarts} times (orchestrate.max_worker_restarts="
                                   f"{self.config.orchestrate.max_worker_restarts}); last error:\n{worker.error}")
            print(f"[rlyard] rollout worker {worker.index} died; restarting it.\n{worker.error}".rstrip())
            if worker.ticket is not None:
                self.source.settle([worker.ticket], requeue=True)
            self._start(worker)

    def close(self) -> None:
        """Stop handing out work, abandon episodes at their next turn, wait (bounded) for the threads."""
        self.stop.set()
        self.source.close()
        deadline = self.config.orchestrate.shutdown_timeout_s
        end = time.monotonic() + deadline
        for worker in self.workers:
            worker.thread.join(timeout=max(0.0, end - time.monotonic()))
        stuck = [w.index for w in self.workers if w.thread.is_alive()]
        if stuck:
            print(f"[rlyard] rollout workers {stuck} still busy after {deadline:.0f} s (a slow tool?); leaving them behind")
