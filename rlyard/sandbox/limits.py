"""Per-run resource limits, in a module of their own so the sandbox and its output capture both
import them without importing each other."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits; every process in the sandbox gets the rlimits, and the whole
    sandbox gets a cgroup where the machine has one (`cgroups.py`)."""

    wall_s: float = 30.0  # wall-clock time; the whole sandbox is killed after it
    cpu_s: int = 30  # RLIMIT_CPU per process (SIGXCPU, then SIGKILL one second later)
    memory_bytes: int | None = 1 << 30  # RLIMIT_AS per process (address space, not RSS); None = unlimited (ASan's shadow)
    rss_bytes: int | None = None  # resident memory of the whole process tree, polled; the run is killed above it
    nproc: int = 64  # RLIMIT_NPROC: processes + threads of the sandbox uid
    fsize_bytes: int = 64 << 20  # RLIMIT_FSIZE: largest file a process may write (SIGXFSZ)
    nofile: int = 256  # RLIMIT_NOFILE: open file descriptors per process
    output_bytes: int = 1 << 20  # bytes kept per stream (stdout, stderr); the rest is dropped
    output_kill_bytes: int = 64 << 20  # a stream that produces more than this gets the run killed
    tmp_bytes: int = 64 << 20  # size of the private tmpfs on /tmp (bwrap)
    # the workspace's room beyond what it held when the Sandbox was made: its own tmpfs of that many more bytes and
    # inodes where the host can mount one (ENOSPC past it, across calls), else growth per run polled (killed, "disk")
    workspace_bytes: int | None = 1 << 30
    workspace_inodes: int = 65536  # files, folders and links beyond the workspace's own (tmpfs only)
    # cgroup of the whole sandbox (processes, their page cache and tmpfs files): memory.max is
    # group_memory_bytes, else rss_bytes, else memory_bytes; pids.max is nproc; cpus: a CPU quota (None = none)
    group_memory_bytes: int | None = None
    cpus: float | None = None
    cgroup: bool = True  # False: only the rlimits and the watchdogs, even where a cgroup is possible

    def sandbox_memory(self) -> int | None:
        """memory.max of the sandbox's cgroup."""
        for value in (self.group_memory_bytes, self.rss_bytes, self.memory_bytes):
            if value is not None:
                return value
        return None
