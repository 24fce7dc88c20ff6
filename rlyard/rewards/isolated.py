"""Grading code that a reply can stall, in a child process that is killed when it overruns.

Checking math equivalence evaluates what the policy wrote: `\\boxed{9^{9^{9^{9}}}}` makes sympy
compute a power tower in C, holding the GIL, so no in-process timeout (signals, threads) ever
fires and the whole trainer freezes. A policy that finds this stops training for everyone. So
the check runs in a long-lived child process, one request at a time, with a deadline and an
address-space limit; a request that overruns kills the child (the next one starts a fresh child).
"""
from __future__ import annotations

import json
import select
import subprocess
import sys
import threading
import time
from typing import Any


class Overran(Exception):
    """The request did not finish within the deadline, or killed its process (memory)."""


class IsolatedFunction:
    """`target` ("module:function", JSON in and out) called in a child process with a deadline."""

    def __init__(self, target: str, timeout_s: float = 5.0, memory_mb: int = 2048):
        self.target, self.timeout_s, self.memory_mb = target, timeout_s, memory_mb
        self._child: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        with self._lock:
            child = self._child if self._child is not None and self._child.poll() is None else self._start()
            child.stdin.write(json.dumps(args) + "\n")
            child.stdin.flush()
            line = self._read_line(child, time.monotonic() + self.timeout_s)
            if line is None:
                self.close()
                raise Overran(f"{self.target} overran {self.timeout_s:g} s (or ran out of {self.memory_mb} MB)")
            answer = json.loads(line)
            if "error" in answer:
                raise RuntimeError(f"{self.target}: {answer['error']}")
            return answer["result"]

    def _start(self) -> subprocess.Popen:
        self._child = subprocess.Popen(
            [sys.executable, "-m", "rlyard.rewards.worker", self.target, str(self.memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )
        ready = self._read_line(self._child, time.monotonic() + 120)
        if ready is None or json.loads(ready).get("ready") is not True:
            reason = json.loads(ready).get("error") if ready else "no answer within 120 s"
            self.close()
            raise RuntimeError(f"cannot start the grader process for {self.target}: {reason}")
        return self._child

    @staticmethod
    def _read_line(child: subprocess.Popen, deadline: float) -> str | None:
        """One line of the child's output before the deadline; None if it overruns or dies."""
        stream = child.stdout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([stream], [], [], left)
            if readable:
                line = stream.readline()
                return line if line else None

    def close(self) -> None:
        if self._child is not None:
            if self._child.poll() is None:
                self._child.kill()
            self._child.wait()
            for stream in (self._child.stdin, self._child.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self._child = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
