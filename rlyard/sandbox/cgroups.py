"""Per-sandbox limits with a cgroup of its own: memory, process count and CPU share of one
sandbox's whole process tree.

The CPU weight stays the default: a sandbox given less CPU than its neighbours on a busy host
would meet its wall time before its CPU time, and its grade would measure the host's load.

rlimits are per process (RLIMIT_AS) or per uid (RLIMIT_NPROC), so a sandbox of many
processes can hold `nproc x memory_bytes`, and sandboxes sharing a uid share one process
budget. A cgroup counts the whole tree, its tmpfs files included, whatever uid it runs as.

Where, best first: cgroup v2 (a delegated cgroup named by `RLYARD_SANDBOX_CGROUP`, e.g. one
the setup script made, or this process's own cgroup when it may enable `memory` and `pids`
for its children), then cgroup v1 (the `memory` and `pids` hierarchies, plus `cpu` when
mounted, writable by root). Neither: the rlimits and the RSS watchdog alone (`backend()` is
None); one log line says which is used.
"""
from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("rlyard.sandbox")

ROOT = Path("/sys/fs/cgroup")
NEEDED = ("memory", "pids")
PERIOD_US = 100_000
# bwrap's monitor and the namespace's init (unshare: itself and its forked child) live in the
# cgroup too: pids.max is nproc plus these, so the command keeps its whole nproc budget
SANDBOX_PIDS = 2


@dataclass(frozen=True)
class Backend:
    """Where sandbox cgroups are made: `parents` maps a controller to its parent folder
    (v2: one folder for all controllers)."""

    version: str  # "v2" or "v1"
    parents: dict[str, Path]

    def describe(self) -> str:
        where = ", ".join(f"{name} {path}" for name, path in self.parents.items())
        return f"cgroup {self.version} per sandbox ({where})"


_lock = threading.Lock()
_detected: list[Backend | None] = []
_counter = itertools.count()


def backend() -> Backend | None:
    """The cgroup mechanism of this machine, probed once (with its log line); None = fallback."""
    with _lock:
        if not _detected:
            found, why = _detect()
            _detected.append(found)
            if found is not None:
                log.info("sandbox limits: %s: memory.max, pids.max (cpu.max with Limits.cpus)", found.describe())
                _remove_orphans(found)
            else:
                log.info("sandbox limits: rlimits per process + RSS watchdog (no usable cgroup: %s)", why)
        return _detected[0]


def _remove_orphans(found: Backend) -> None:
    """Cgroups left by an rlyard process that was killed (SIGKILL skips `close`)."""
    for parent in set(found.parents.values()):
        for folder in parent.glob("rlyard-*-*"):
            pid = folder.name.split("-")[1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _kill_all(folder, found.version)
                _remove(folder)


def fallback_reason() -> str:
    return _detect()[1]


def _own_paths() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _mounts() -> tuple[Path | None, dict[str, Path]]:
    """(the cgroup2 mount, v1 controller -> its mount) from /proc/self/mountinfo."""
    unified, v1 = None, {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        if fstype == "cgroup2" and unified is None:
            unified = Path(fields[4])
        elif fstype == "cgroup":
            for name in options:
                v1.setdefault(name, Path(fields[4]))
    return unified, v1


def _usable(parent: Path, probe_files: tuple[str, ...]) -> bool:
    """Can we make a child cgroup here and find the limit files in it?"""
    probe = parent / f"rlyard-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return all((probe / name).exists() for name in probe_files)
    finally:
        try:
            probe.rmdir()
        except OSError:
            pass


def _v2_parent(unified: Path, own: str) -> tuple[Path | None, str]:
    named = os.environ.get("RLYARD_SANDBOX_CGROUP")
    parent = Path(named) if named else unified / own.lstrip("/")
    control = parent / "cgroup.subtree_control"
    if not control.is_file():
        return None, f"{parent} is not a cgroup v2 folder"
    enabled = control.read_text().split()
    available = (parent / "cgroup.controllers").read_text().split()
    missing = [c for c in NEEDED if c not in available]
    if missing:
        return None, f"cgroup v2 at {parent} lacks {', '.join(missing)} (controllers: {' '.join(available) or 'none'})"
    for name in [c for c in (*NEEDED, "cpu") if c in available and c not in enabled]:
        try:  # refused (EBUSY) in a non-root cgroup that holds processes: a setup-made one has none
            control.write_text(f"+{name}")
        except OSError as error:
            if name in NEEDED:
                return None, f"cannot enable {name} in {control} ({error.strerror}); set RLYARD_SANDBOX_CGROUP"
    if not _usable(parent, ("memory.max", "pids.max")):
        return None, f"cannot make a child cgroup in {parent}"
    return parent, ""


def _detect() -> tuple[Backend | None, str]:
    if os.environ.get("RLYARD_SANDBOX_CGROUPS", "1") == "0":
        return None, "RLYARD_SANDBOX_CGROUPS=0"
    try:
        unified, v1 = _mounts()
        own = _own_paths()
    except (OSError, ValueError, IndexError) as error:
        return None, f"cannot read the cgroup mounts ({error})"
    reasons = []
    if unified is not None:
        parent, why = _v2_parent(unified, own.get("", "/"))
        if parent is not None:
            return Backend("v2", {"memory": parent, "pids": parent, "cpu": parent}), ""
        reasons.append(why)
    if all(name in v1 for name in NEEDED):
        parents = {name: v1[name] / own.get(name, "/").lstrip("/") for name in (*NEEDED, "cpu") if name in v1}
        files = {"memory": ("memory.limit_in_bytes",), "pids": ("pids.max",), "cpu": ("cpu.shares",)}
        if all(_usable(parents[name], files[name]) for name in NEEDED):
            if "cpu" in parents and not _usable(parents["cpu"], files["cpu"]):
                del parents["cpu"]
            return Backend("v1", parents), ""
        reasons.append("cgroup v1 memory / pids hierarchies are not writable here")
    elif v1:
        reasons.append(f"cgroup v1 without {' and '.join(n for n in NEEDED if n not in v1)}")
    return None, "; ".join(reasons) or "no cgroup file system mounted"


@dataclass(frozen=True)
class Usage:
    """What a sandbox's cgroup saw during one run."""

    out_of_memory: bool  # the sandbox reached memory.max
    pids_refused: int  # forks refused at pids.max
    memory_peak: int | None  # bytes, where the kernel reports it


class SandboxCgroup:
    """One run's cgroup(s): made with the limits written, entered by the command's first
    process, killed and removed by `close()`."""

    def __init__(self, found: Backend, memory_bytes: int | None, pids: int, cpus: float | None):
        self.backend = found
        name = f"rlyard-{os.getpid()}-{next(_counter)}"
        self.dirs = {controller: parent / name for controller, parent in found.parents.items()
                     if controller != "cpu" or cpus is not None}
        made = []
        try:
            for folder in dict.fromkeys(self.dirs.values()):
                folder.mkdir()
                made.append(folder)
            self._write_limits(memory_bytes, pids, cpus)
        except OSError:
            for folder in made:
                _remove(folder)
            raise

    def _write_limits(self, memory_bytes: int | None, pids: int, cpus: float | None) -> None:
        mem, pid, cpu = self.dirs["memory"], self.dirs["pids"], self.dirs.get("cpu")
        (pid / "pids.max").write_text(str(pids))
        # At memory.max the whole run is killed, as the RSS watchdog does: v2 kills the cgroup at
        # once (memory.oom.group); v1 pauses it (oom_kill_disable) until `out_of_memory` sees it.
        if self.backend.version == "v2":
            if memory_bytes is not None:
                (mem / "memory.max").write_text(str(memory_bytes))
                _try_write(mem / "memory.swap.max", "0")
                _try_write(mem / "memory.oom.group", "1")
            if cpu is not None and cpus is not None:
                (cpu / "cpu.max").write_text(f"{int(cpus * PERIOD_US)} {PERIOD_US}")
            return
        if memory_bytes is not None:
            (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
            _try_write(mem / "memory.memsw.limit_in_bytes", str(memory_bytes))  # no escape into swap
            (mem / "memory.oom_control").write_text("1")
        if cpu is not None and cpus is not None:
            (cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (cpu / "cpu.cfs_quota_us").write_text(str(int(cpus * PERIOD_US)))

    def enter_argv(self, argv: list[str]) -> list[str]:
        """`argv` behind a shell that moves itself into the cgroup(s) before it execs: every
        process of the sandbox is born inside, none can start before the move."""
        moves = " && ".join(f"echo $$ > '{folder}/cgroup.procs'" for folder in dict.fromkeys(self.dirs.values()))
        return ["/bin/sh", "-c", f'{moves} || exit 125; exec "$@"', "sh", *argv]

    def out_of_memory(self) -> bool:
        """The sandbox reached memory.max (polled by the run loop, which then kills the run)."""
        mem = self.dirs["memory"]
        if self.backend.version == "v2":
            events = _keyed(mem / "memory.events")
            return events.get("oom_kill", 0) > 0 or events.get("oom_group_kill", 0) > 0
        return _keyed(mem / "memory.oom_control").get("under_oom", 0) > 0

    def usage(self, out_of_memory: bool) -> Usage:
        mem, pid = self.dirs["memory"], self.dirs["pids"]
        peak = _read_int(mem / ("memory.peak" if self.backend.version == "v2" else "memory.max_usage_in_bytes"))
        return Usage(out_of_memory=out_of_memory or self.out_of_memory(),
                     pids_refused=_keyed(pid / "pids.events").get("max", 0), memory_peak=peak)

    def close(self) -> None:
        """Kill whatever is left in the cgroup, drop the page cache it brought in, then remove it."""
        for folder in dict.fromkeys(self.dirs.values()):
            _kill_all(folder, self.backend.version)
            if folder == self.dirs["memory"]:
                self._drop_cache(folder)
            _remove(folder)

    def _drop_cache(self, folder: Path) -> None:
        """Evict the file pages this run was the first to read (they are charged to its cgroup).

        A run that reads a cold chunk of a big system file leaves it in the page cache, and a
        later run can tell by timing a read: one bit per chunk from one episode to the next
        (issue 36). Pages that were cached before the run are charged elsewhere and stay, so
        what is left says nothing about this run. Removing the cgroup would hand these pages
        to the parent instead. tmpfs pages cannot go without swap and are handed over as before.
        """
        if self.backend.version == "v2":
            _try_write(folder / "memory.reclaim", str(1 << 50))  # EAGAIN when not all of it could go: fine
        else:
            _try_write(folder / "memory.force_empty", "0")


def _try_write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError:
        pass  # no swap accounting on this kernel: nothing to escape into either


def _keyed(path: Path) -> dict[str, int]:
    try:
        pairs = (line.split() for line in path.read_text().splitlines())
        return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}
    except OSError:
        return {}


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _kill_all(folder: Path, version: str, timeout_s: float = 5.0) -> None:
    if version == "v2" and (folder / "cgroup.kill").exists():
        _try_write(folder / "cgroup.kill", "1")
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)


def _remove(folder: Path) -> None:
    for _ in range(100):  # rmdir is refused while dying processes are still charged
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    log.warning("sandbox cgroup %s could not be removed", folder)
