"""A pool of host uids, one per running sandbox (used when rlyard runs as root).

Every run gets a uid nobody else holds at that moment, so concurrently running sandboxes do
not share the kernel's per-uid state: the `RLIMIT_NPROC` count, the user keyring, signals.
A slot is held with `fcntl.flock` on a lock file in a root-only directory, which works across
threads (each lease opens its own file description) and across processes; the kernel drops
the lock if the holder dies, so a crashed rlyard never leaks slots.
"""
from __future__ import annotations

import fcntl
import os
import random
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_BASE = 1_500_000
DEFAULT_SIZE = 4096


class UidPoolExhausted(RuntimeError):
    """Every uid of the pool is held by a running sandbox."""


def default_lock_dir() -> Path:
    run = Path("/run")
    if os.geteuid() == 0 and run.is_dir() and os.access(run, os.W_OK):
        return run / "rlyard-uids"
    return Path(tempfile.gettempdir()) / f"rlyard-uids-{os.geteuid()}"


def _private_dir(path: Path) -> Path:
    """Create `path` mode 0700, or accept it only if it is our own, not a link, not shared."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError(f"uid pool lock dir {path} must be a directory of uid {os.geteuid()} with mode 0700")
    return path


@dataclass
class UidLease:
    """One held uid (and gid, the same number) until `release()`."""

    uid: int
    gid: int
    _fd: int = field(repr=False)
    _pool: "UidPool" = field(repr=False)

    def release(self) -> None:
        if self._fd >= 0:
            self._pool._release(self)

    def __enter__(self) -> "UidLease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class UidPool:
    """uids `base` .. `base + size - 1`; `acquire()` hands out one no other lease holds."""

    def __init__(self, base: int = DEFAULT_BASE, size: int = DEFAULT_SIZE, lock_dir: Path | str | None = None):
        if base <= 0 or size <= 0 or base + size > 2**32 - 2:
            raise ValueError(f"bad uid range {base}+{size}")
        self.base, self.size = base, size
        self.lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir()
        self._lock = threading.Lock()
        self._held: set[int] = set()
        self._ready = False

    def owns(self, uid: int) -> bool:
        return self.base <= uid < self.base + self.size

    def acquire(self) -> UidLease:
        with self._lock:
            if not self._ready:
                _private_dir(self.lock_dir)
                self._ready = True
            start = random.randrange(self.size)
            for i in range(self.size):
                slot = (start + i) % self.size
                if slot in self._held:
                    continue
                fd = os.open(self.lock_dir / f"{self.base + slot}.lock",
                             os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self._held.add(slot)
                uid = self.base + slot
                return UidLease(uid, uid, fd, self)
        raise UidPoolExhausted(f"all {self.size} sandbox uids from {self.base} are in use")

    def _release(self, lease: UidLease) -> None:
        with self._lock:
            fd, lease._fd = lease._fd, -1
            self._held.discard(lease.uid - self.base)
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


_default: UidPool | None = None
_default_lock = threading.Lock()


def default_pool() -> UidPool:
    """The process-wide pool; `RLYARD_SANDBOX_UID_BASE` / `RLYARD_SANDBOX_UID_COUNT` move it."""
    global _default
    with _default_lock:
        if _default is None:
            _default = UidPool(int(os.environ.get("RLYARD_SANDBOX_UID_BASE", DEFAULT_BASE)),
                               int(os.environ.get("RLYARD_SANDBOX_UID_COUNT", DEFAULT_SIZE)))
        return _default
