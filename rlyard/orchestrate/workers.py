"""Async mode's rollout side: an engine shared by threads, and a pool of rollout workers.

Threads, not processes: the engine is torch, which releases the GIL inside its ops, and the
latency async mode hides is mostly tools and graders waiting (sleeps, subprocesses, HTTP).
Each worker takes a ticket, plays the task's whole group through the same `rollout()` as sync
mode, and puts the finished group into a bounded buffer. A worker that dies is replaced by the
learner thread (which polls the pool), and its task is played again. A learner that waits
longer than LEARNER_WAIT_WARNING_S for a group says what it waits for (and again after each
further bound), so that no configuration can hang without a word.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

from rlyard.config import RunConfig
from rlyard.orchestrate.buffer import Group, TaskSource, Ticket
from rlyard.orchestrate.rollout import rollout
from rlyard.orchestrate.sampling import agent_limits, greedy_rewards, sampling_for_step
from rlyard.orchestrate.setup import Components

# Seconds the learner may wait for one group before it warns (repeated after each further bound).
# No orchestrate.* field holds it; a module constant, so that tests can lower it.
LEARNER_WAIT_WARNING_S = 60.0


class Stopped(Exception):
    """Raised inside a worker's rollout when the pool shuts down: the episode is abandoned."""


class SharedEngine:
    """One engine for every thread. Generate calls run side by side; new weights wait for the calls
    in flight and hold back new ones (writer preference), so no forward pass sees half-copied weights.

    `rlyard serve --learn` serves through one too (the server's scheduler is its only reader).

    A multi-turn episode calls generate once per turn, so new weights land between its turns (a
    partial rollout; every token keeps the version that sampled it). `pinned()` instead holds the
    weights for a whole block (partial_rollouts=false).

    int8 rollouts: the engine's first batches run in fp32 and measure the quantisation scales;
    packing the int8 layers changes what a forward pass computes, so it is a write like a weight
    update. The shared engine therefore tells the engine not to quantise inside generate (under
    the shared lock, while other threads are mid-forward) and quantises itself, under the
    exclusive lock, when a thread lets go of its outermost hold on the weights.
    """

    passes_hooks = True  # generate hands `on_step` (the server's streaming hook) to the engine

    def __init__(self, engine):
        self.engine = engine
        self._cond = threading.Condition()
        self._readers = self._writers_waiting = 0
        self._writing = False
        self._local = threading.local()
        self._quantizes = hasattr(engine, "quantize_if_calibrated")
        if self._quantizes:
            engine.defer_quantization = True  # ours to do, under the exclusive lock

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    @property
    def model(self):
        return self.engine.model

    @property
    def takes_lora_factors(self) -> bool:
        """A push to the int8 engine carries the LoRA factors (setup.push_weights), as in sync runs."""
        return getattr(self.engine, "takes_lora_factors", False)

    def metrics(self) -> dict[str, float]:
        """The engine's own counters (e.g. vLLM's merged calls), logged each step."""
        return self.engine.metrics() if hasattr(self.engine, "metrics") else {}

    @property
    def writers_waiting(self) -> int:
        """Weight updates (or int8 packing) waiting for the forward passes in flight."""
        with self._cond:
            return self._writers_waiting

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
        if depth == 0 and self._quantizes and self.engine.quantization_pending:
            self._exclusive("int8 packing", self.engine.quantize_if_calibrated)  # no-op if another thread got there first

    def generate(self, prompts, params, n: int = 1, on_step=None):
        with self.pinned():
            return self.engine.generate(prompts, params, n, **({"on_step": on_step} if on_step is not None else {}))

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        self._exclusive(f"the weight update to policy version {version}", self.engine.update_weights, version, state_dict)

    def _exclusive(self, what: str, fn, *args):
        """Run fn once no forward pass is in flight, holding back new ones (writer preference).
        Warns after each LEARNER_WAIT_WARNING_S that it still waits."""
        if getattr(self._local, "depth", 0):
            raise RuntimeError(f"{what}: a thread that holds the weights (pinned) cannot change them; it would wait for itself")
        with self._cond:
            self._writers_waiting += 1
            started = time.monotonic()
            warn_at = started + LEARNER_WAIT_WARNING_S
            try:
                while self._writing or self._readers:
                    self._cond.wait(timeout=max(0.001, warn_at - time.monotonic()))
                    now = time.monotonic()
                    if (self._writing or self._readers) and now >= warn_at:
                        print(f"[rlyard] warning: {what} has waited {now - started:.1f} s for {self._readers} rollout threads "
                              f"that hold the weights (a generate call in flight, or a whole group with "
                              f"orchestrate.partial_rollouts=false){' and another update' if self._writing else ''}. "
                              "A slow or stuck tool, grader or environment?", flush=True)
                        warn_at = now + LEARNER_WAIT_WARNING_S
            finally:
                self._writers_waiting -= 1
            self._writing = True
        try:
            return fn(*args)
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


class WorkerFleet(WorkerEngine):
    """A worker's view of a Ray fleet: its groups go to the rollout actors whole."""

    def play_groups(self, *args):
        if self.stop.is_set():
            raise Stopped()
        return self.shared.play_groups(*args)


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

    def __enter__(self) -> RolloutPool:
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
        engine = (WorkerFleet if hasattr(self.engine, "play_groups") else WorkerEngine)(self.engine, self.stop)
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

    def get(self, poll_s: float = 0.1, waiting_for: Callable[[], str] | None = None) -> Group:
        """The next finished group; replaces dead workers while it waits. After each
        LEARNER_WAIT_WARNING_S without one it warns, with `waiting_for()` (what the step has so far)."""
        started = time.monotonic()
        warn_at = started + LEARNER_WAIT_WARNING_S
        while True:
            self.check_workers()
            try:
                return self.buffer.get(timeout=max(0.001, min(poll_s, warn_at - time.monotonic())))
            except queue.Empty:
                now = time.monotonic()
                if now >= warn_at:
                    print(self.wait_warning(now - started, waiting_for() if waiting_for else ""), flush=True)
                    warn_at = now + LEARNER_WAIT_WARNING_S

    def wait_warning(self, waited_s: float, waiting_for: str = "") -> str:
        """The learner's too-long-a-wait message: what it waits for and where the groups are."""
        o, source = self.config.orchestrate, self.source
        outstanding, queued, limit = source.outstanding, self.buffer.qsize(), source.limit
        busy = sum(w.ticket is not None for w in self.workers)
        bound = f"limit {limit}" if limit is not None else "no limit"
        message = (f"[rlyard] warning: the learner has waited {waited_s:.1f} s for a group: {waiting_for or f'policy version {self.engine.policy_version}'}; "
                   f"{outstanding} groups outstanding ({bound}: staleness_policy={o.staleness_policy}, max_staleness={o.max_staleness}), "
                   f"{queued} queued in the buffer (capacity {self.buffer.maxsize}), {busy} of {len(self.workers)} workers busy, "
                   f"{self.finished_groups} groups finished so far.")
        if limit is not None and outstanding >= limit and not queued and not busy:
            message += " The producers wait on the outstanding limit while the learner waits for them: a deadlock (please report it)."
        else:
            message += " A slow or stuck tool, grader or environment?"
        return message

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
