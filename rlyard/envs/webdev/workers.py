"""The threads that own the grader's browsers, and a wait on them that always ends.

Rollout threads come and go (a harness pool's threads end with the pool), and a browser left in
a dead thread's local storage could never be closed: Playwright's sync objects answer only the
thread that made them. So pages are rendered by `count` long-lived worker threads, each owning
one browser (render.py), never by the caller's thread.

A caller's wait is bounded (`run(..., limit_s=...)`), counted from the moment a worker starts
the job, not while it waits in the queue behind others. Past the limit `on_stuck(False)` runs
(for a page: kill its browser's processes, which makes the Playwright call waiting on them
fail) and the job gets `STUCK_GRACE_S` more to come back. If it still has not, its worker is
given up: `on_stuck(True)` (kill the Playwright driver too), a new thread takes over the slot
and its queue, so later jobs are not held behind the stuck one, and the caller gets
`WorkerStuck`. The old thread, should it ever come back, closes its browser and ends.
"""
from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger("rlyard.envs.webdev")

STUCK_GRACE_S = 5.0  # after on_stuck(False) kills the browser, before the worker is given up
POLL_S = 0.5  # how often a caller looks whether its queued job has started


class WorkerStuck(RuntimeError):
    """A job ran past its limit and did not come back once its browser was killed: its worker
    thread was replaced."""


@dataclass(eq=False)
class _Job:
    fn: Callable[[], Any]
    future: Future = field(default_factory=Future)
    started: float | None = None  # time.monotonic() when a worker took it
    abandoned: bool = False  # its caller gave up on it (WorkerStuck)


@dataclass(eq=False)
class _Slot:
    index: int
    jobs: queue.Queue = field(default_factory=queue.Queue)
    busy: int = 0  # jobs queued or running, counted for the least-busy choice
    thread: threading.Thread | None = None  # the one thread that serves `jobs` now
    generation: int = 0


class BrowserWorkers:
    """`count` long-lived threads, each owning one browser; graders in any thread hand them jobs."""

    def __init__(self, count: int, close_browser: Callable[[], None] | None = None):
        self.count = max(1, count)
        # closes the calling worker's browser: run on every worker by close(), and by a replaced
        # thread before it ends
        self.close_browser = close_browser
        self.replaced = 0  # worker threads given up so far
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()

    def _spawn(self, slot: _Slot) -> None:
        suffix = f"-{slot.generation}" if slot.generation else ""
        slot.thread = threading.Thread(target=self._serve, args=(slot,), daemon=True,
                                       name=f"rlyard-webdev-browser-{slot.index}{suffix}")
        slot.thread.start()

    def _serve(self, slot: _Slot) -> None:
        me = threading.current_thread()
        while slot.thread is me:
            job: _Job = slot.jobs.get()
            if job.future.set_running_or_notify_cancel():
                job.started = time.monotonic()
                try:
                    job.future.set_result(job.fn())
                except BaseException as error:
                    job.future.set_exception(error)
            with self._lock:
                if not job.abandoned:
                    slot.busy -= 1
        if self.close_browser is not None:  # replaced while it was stuck: its browser is of no more use
            try:
                self.close_browser()
            except Exception:
                pass

    def _start(self) -> None:
        for index in range(self.count):
            slot = _Slot(index)
            self._slots.append(slot)
            self._spawn(slot)
        atexit.register(self.close)

    def _submit(self, slot: _Slot, fn: Callable[[], Any]) -> _Job:
        job = _Job(fn)
        slot.busy += 1
        slot.jobs.put(job)
        return job

    def run(self, fn: Callable[[], Any], limit_s: float | None = None,
            on_stuck: Callable[[bool], None] | None = None) -> Any:
        """`fn()` on the least busy worker; its result, or its exception raised here. With
        `limit_s`, a job running longer is stopped as the module docstring says (`WorkerStuck`)."""
        with self._lock:
            if not self._slots:
                self._start()
            slot = min(self._slots, key=lambda s: s.busy)
            job = self._submit(slot, fn)
        if limit_s is None:
            return job.future.result()
        return self._wait(slot, job, limit_s, on_stuck)

    def _wait(self, slot: _Slot, job: _Job, limit_s: float, on_stuck: Callable[[bool], None] | None) -> Any:
        deadline: float | None = None
        killed = False
        while True:
            if deadline is None and job.started is not None:
                deadline = job.started + limit_s
            wait = POLL_S if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return job.future.result(timeout=wait)
            except TimeoutError:
                if job.future.done():  # the job's own TimeoutError, not the wait's
                    raise
            if deadline is None or time.monotonic() < deadline:
                continue
            if not killed:
                killed, deadline = True, deadline + STUCK_GRACE_S
                log.warning("webdev browser: a job ran past %.0f s; killing its browser", limit_s)
                if on_stuck is not None:
                    on_stuck(False)
                continue
            if not self._retire(slot, job):
                return job.future.result()  # it came back just now
            if on_stuck is not None:
                on_stuck(True)
            raise WorkerStuck(f"a browser worker did not come back {limit_s + STUCK_GRACE_S:.0f} s after it started "
                              "a job, its browser killed; the worker was replaced")

    def _retire(self, slot: _Slot, job: _Job) -> bool:
        """Give up the thread stuck in `job`: a new one serves the slot's queue. False when the
        job finished meanwhile (nothing is replaced)."""
        with self._lock:
            if job.future.done() or slot.thread is None:
                return False
            job.abandoned = True
            slot.busy -= 1
            slot.generation += 1
            self.replaced += 1
            self._spawn(slot)
        log.warning("webdev browser: worker %d stuck in a job past its limit; replaced by a new thread", slot.index)
        return True

    def each(self, fn: Callable[[], Any], timeout_s: float | None = None) -> None:
        """`fn()` once on every started worker (close or restart their browsers)."""
        with self._lock:
            jobs = [self._submit(slot, fn) for slot in self._slots]
        for job in jobs:
            job.future.result(timeout=timeout_s)

    def close(self) -> None:
        """Close every worker's browser (the threads stay, and start a browser again when used)."""
        if self.close_browser is None:
            return
        try:
            self.each(self.close_browser, timeout_s=30)
        except Exception:
            pass
