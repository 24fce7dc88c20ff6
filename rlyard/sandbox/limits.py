"""Per-run resource limits, in a module of their own so the sandbox and its output capture both
import them without importing each other."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits; every process in the sandbox gets the rlimits."""

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
