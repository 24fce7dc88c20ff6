"""The run loop's helpers: output capture with caps, stdin feeding, killing and teardown."""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from rlyard.sandbox.limits import Limits
from rlyard.sandbox.procfs import proc_stat, rss_bytes

CHUNK = 65536


class TeardownError(RuntimeError):
    """The sandbox's pid namespace did not go away (raised as SandboxError by the caller)."""


def wait_namespace_gone(info: bytes, timeout_s: float = 5.0) -> None:
    """Wait until bwrap's pid-namespace init (host pid from --info-fd) has exited.

    bwrap's monitor exits as soon as init reports the command's exit status, while the kernel
    may still be killing the namespace's other processes; they are all reaped before init
    turns into a zombie, so "init gone or zombie" means nothing of the sandbox is left.
    """
    try:
        pid = int(json.loads(info)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        found = proc_stat(pid)
        if found is None or found.comm != "bwrap" or found.state in "ZX":
            return
        time.sleep(0.005)
    raise TeardownError(f"sandbox namespace (init pid {pid}) still alive {timeout_s}s after the run")


def _children(pid: int) -> list[int]:
    """The children of `pid`; none once it has exited (its /proc folder may vanish mid-listing)."""
    kids = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").glob("*/children"))
    except OSError:  # the process exited while its task folder was being listed
        return kids
    for task in tasks:
        try:
            kids += [int(k) for k in task.read_text().split()]
        except OSError:
            pass
    return kids


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants (processes that exit meanwhile count 0)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss_bytes(current)
        todo += _children(current)
    return total


def disk_use(root: Path) -> int:
    """Bytes of disk the files under `root` occupy (blocks, so a sparse file counts what it
    really holds); links are not followed, entries that vanish meanwhile count 0."""
    total, todo = 0, [str(root)]
    while todo:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
        except OSError:
            continue
    return total


class DiskWatch:
    """Polls the workspace's growth against `Limits.workspace_bytes`: many files, each under
    RLIMIT_FSIZE, would otherwise fill the host's disk. A walk costs time, so the next one
    comes after at least ten times the last walk's duration."""

    def __init__(self, root: Path, limit: int):
        self.root, self.limit = root, limit
        self.base = disk_use(root)
        self.next_at = 0.0

    def over(self, now: float) -> bool:
        if now < self.next_at:
            return False
        started = time.monotonic()
        grown = disk_use(self.root) - self.base
        self.next_at = now + max(0.25, 10 * (time.monotonic() - started))
        return grown > self.limit


def read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, CHUNK)
    except BlockingIOError:
        return b""


class Capture:
    """Feeds stdin and reads stdout/stderr incrementally, keeping at most `output_bytes` each."""

    def __init__(self, proc: subprocess.Popen, stdin: bytes | None, limits: Limits, namespaced: bool,
                 disk: DiskWatch | None = None, out_of_memory: Callable[[], bool] | None = None):
        self.proc, self.limits, self.namespaced, self.disk = proc, limits, namespaced, disk
        self.out_of_memory = out_of_memory  # the sandbox's cgroup reached memory.max
        self.out, self.err = bytearray(), bytearray()
        self.seen = {"out": 0, "err": 0}
        self.truncated = False
        self.stdin = memoryview(stdin) if stdin is not None else None

    def kill(self) -> None:
        """Kill the pid namespace's init (the monitor's child), then let the monitor finish.

        The kernel kills and reaps every process of a pid namespace before its init is gone,
        and bwrap/unshare exit only after that, so waiting for the monitor means nothing is
        left. Killing the monitor first would return while the namespace is still dying.
        """
        if not self.namespaced:
            return self.sweep()
        for pid in _children(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def sweep(self) -> None:
        # Last resort and the whole story for isolation="none": the monitor's process group.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def pump(self, deadline: float) -> str | None:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ, "out")
        sel.register(self.proc.stderr, selectors.EVENT_READ, "err")
        if self.stdin is not None:
            os.set_blocking(self.proc.stdin.fileno(), False)
            sel.register(self.proc.stdin, selectors.EVENT_WRITE, "in")
        reason = None
        exited_at = None
        while sel.get_map():
            now = time.monotonic()
            if reason is None and now >= deadline:
                reason = "wall_time"
                self.kill()
            if exited_at is None and self.proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 2.0:
                break  # pipes held open by something outside our reach; stop waiting
            if reason is None and ((self.out_of_memory is not None and self.out_of_memory()) or (
                    self.limits.rss_bytes is not None and tree_rss(self.proc.pid) > self.limits.rss_bytes)):
                reason = "memory"
                self.kill()
            if reason is None and self.disk is not None and self.disk.over(now):
                reason = "disk"
                self.kill()
            for key, _ in sel.select(timeout=0.05):
                if key.data == "in":
                    self._feed(sel, key.fileobj)
                    continue
                data = os.read(key.fileobj.fileno(), CHUNK)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                if self._keep(key.data, data) and reason is None:
                    reason = "output_limit"
                    self.kill()
        sel.close()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None and not pipe.closed:
                try:
                    pipe.close()
                except OSError:
                    pass
        try:  # normal exit: the namespace is already gone once the monitor exits
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        self.sweep()  # nothing of the sandbox may outlive the run
        self.proc.wait()
        return reason

    def _feed(self, sel: selectors.BaseSelector, pipe) -> None:
        try:
            n = os.write(pipe.fileno(), self.stdin[:CHUNK])
            self.stdin = self.stdin[n:]
        except (BrokenPipeError, OSError):
            self.stdin = self.stdin[:0]
        if not len(self.stdin):
            sel.unregister(pipe)
            pipe.close()

    def _keep(self, stream: str, data: bytes) -> bool:
        """Store what fits under the cap; True when the stream passed the kill threshold."""
        buf = self.out if stream == "out" else self.err
        room = self.limits.output_bytes - len(buf)
        if room > 0:
            buf += data[:room]
        if len(data) > max(room, 0):
            self.truncated = True
        self.seen[stream] += len(data)
        return self.seen[stream] > self.limits.output_kill_bytes
