"""Run untrusted commands (model output) in an isolated, resource-limited child process.

Isolation, best first: bubblewrap (new mount/pid/net/ipc/uts namespaces, a minimal read-only
root, only the workspace writable, a seccomp filter), then `unshare` (namespaces and rlimits,
but the host file system stays visible, read-only for the sandbox uid except world-writable
places that get a private tmpfs). With neither, `run` refuses unless `allow_unsafe=True`.
Only bwrap is "sealed" (`Sandbox.sealed`, `require_sealed`): tasks with hidden data need it.

Why the child is a real unprivileged uid rather than "uid 65534 in a user namespace": when the
parent is root, bwrap's user namespace maps the sandbox uid onto host uid 0, and the kernel
never enforces RLIMIT_NPROC for host uid 0, so a fork bomb would not be contained. As root we
therefore enter the namespaces as root and drop to a uid with setpriv (no capabilities, empty
bounding set, no_new_privs) before the command starts; each run takes its own uid from a pool
(`uids.py`), so concurrent runs share no per-uid kernel state. As a normal user bwrap's user
namespace keeps the caller's own uid, which the kernel does limit.

Where the host allows mounts (root), a `Sandbox` also owns two mounts for its lifetime
(`mounts.py`): a size- and inode-limited tmpfs on the workspace itself, so the quota is the
kernel's ENOSPC rather than a walk, and a private view of the system tree, so locks on system
files are not shared with other sandboxes; `close()` (or garbage collection) unmounts them.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import stat
import subprocess
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rlyard.errors import PlatformError
from rlyard.sandbox import cgroups, fs, mounts, seccomp
from rlyard.sandbox.capture import Capture, DiskWatch, TeardownError, read_all, wait_namespace_gone
from rlyard.sandbox.fs import MOUNT_POINT
from rlyard.sandbox.limits import Limits
from rlyard.sandbox.uids import UidLease, UidPool, UidPoolExhausted, default_pool

Isolation = Literal["auto", "bwrap", "unshare", "none"]

PATH = "/usr/local/bin:/usr/bin:/bin"


class SandboxError(PlatformError):
    """The sandbox itself failed (could not start, bad setup): an infra failure, not the policy's."""


class SandboxUnavailable(SandboxError):
    """No isolation mechanism is available and `allow_unsafe` was not given."""


@dataclass(frozen=True)
class Result:
    """What one `Sandbox.run` produced."""

    exit_code: int  # the command's exit status; 128 + N when killed by signal N, -9 when we killed it
    stdout: bytes  # at most `Limits.output_bytes`
    stderr: bytes  # at most `Limits.output_bytes`
    timed_out: bool  # the wall-time limit (or `timeout_s`) was reached
    killed_reason: str | None  # "wall_time" | "cpu_time" | "file_size" | "output_limit" | "memory" | "disk" | "signal" | None
    truncated: bool  # some output beyond `output_bytes` was dropped
    duration_s: float  # wall-clock seconds from start to the end of the run
    limited_by: str = "rlimits"  # "cgroup v2" / "cgroup v1": the sandbox had a cgroup of its own; "rlimits": per process only
    forks_refused: int = 0  # forks refused at the cgroup's pids.max

    @property
    def text(self) -> str:
        """stdout then stderr, decoded leniently: what a tool shows the model."""
        return (self.stdout + self.stderr).decode("utf-8", "replace")


_probe_cache: dict[str, bool] = {}


def _probe(argv: list[str]) -> bool:
    """Can this mechanism actually start a process here (a container may forbid namespaces)?"""
    key = " ".join(argv)
    if key not in _probe_cache:
        try:
            done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
            _probe_cache[key] = done.returncode == 0 and done.stdout.strip() == b"ok"
        except (OSError, subprocess.TimeoutExpired):
            _probe_cache[key] = False
    return _probe_cache[key]


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None and _probe(
        ["bwrap", "--unshare-pid", "--unshare-net", *fs.root_fs_args(), "--proc", "/proc", "--dev", "/dev",
         *([] if os.geteuid() == 0 else ["--unshare-user"]), "--", "/bin/echo", "ok"])


def unshare_available() -> bool:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return shutil.which("unshare") is not None and _probe(
        ["unshare", *user, "--fork", "--pid", "--net", "--mount", "--", "/bin/echo", "ok"])


def bwrap_works() -> bool:
    """bwrap starts a sandbox here and util-linux's helpers are installed: `sealed` is possible."""
    helpers = ["prlimit"] + (["setpriv"] if os.geteuid() == 0 else [])
    return all(shutil.which(h) for h in helpers) and seccomp.supported() and bwrap_available()


def require_sealed(allow_weak: bool, why: str) -> bool:
    """Raise `SandboxUnavailable` unless bubblewrap works here or `allow_weak` is True.

    For callers whose sandbox must not see the host (e.g. a task family whose package holds
    hidden tests): `why` names it. Returns whether the sandbox will be sealed.
    """
    if bwrap_works():
        return True
    if allow_weak:
        return False
    found = ("unshare (the host file system stays visible)" if unshare_available() else "no isolation at all")
    if shutil.which("bwrap") and not seccomp.supported():
        found = f"bwrap, but no seccomp filter for {seccomp.machine()}"
    raise SandboxUnavailable(
        f"{why} holds hidden tests; bubblewrap is required (this machine has {found}); "
        "set env.options.allow_weak_isolation=true to run anyway")


class Sandbox:
    """Runs commands with `workspace` as the only writable directory and as the cwd.

    `uid`/`gid`: a fixed identity for commands when the caller is root. Left None (the
    default), each `run()` takes a uid nobody else holds from `uid_pool` (default: 4096 uids
    from 1_500_000, see `uids.py`), so concurrent runs never share the `nproc` budget or other
    per-uid kernel state; the workspace is chowned to the run's uid before it starts.
    `hide`: extra host paths masked inside the sandbox (besides rlyard's package directory and
    the rlyard cache, always masked) where a bind would expose them. `ro_binds`: host folders
    bound read-only at the same path (bwrap; under unshare they are visible anyway).
    """

    def __init__(self, workspace: Path, limits: Limits = Limits(), isolation: Isolation = "auto",
                 allow_unsafe: bool = False, uid: int | None = None, gid: int | None = None,
                 hide: tuple[str | Path, ...] = (), ro_binds: tuple[str | Path, ...] = (),
                 uid_pool: UidPool | None = None):
        self.workspace = Path(workspace).resolve()
        if not self.workspace.is_dir():
            raise SandboxError(f"workspace {self.workspace} is not a directory")
        self.limits = limits
        self.uid = uid
        self.gid = gid if gid is not None else (uid if uid is not None else None)
        self.uid_pool = uid_pool
        self.as_root = os.geteuid() == 0
        try:
            self.ro_binds = tuple(fs.check_ro_bind(p) for p in ro_binds)
            self.hide = fs.hidden_paths(tuple(hide))
        except ValueError as e:
            raise SandboxError(str(e)) from e
        self.isolation = self._choose(isolation, allow_unsafe)
        self._quota: mounts.QuotaFS | None = None
        self._view: mounts.SystemView | None = None
        self._mount_own(limits)

    def _mount_own(self, limits: Limits) -> None:
        """The workspace's own tmpfs and (bwrap) the private system view, where the host allows mounts.

        Both live as long as the Sandbox: `close()`, or its garbage collection, unmounts them
        and leaves the workspace's files in the folder.
        """
        if not mounts.can_mount():
            return
        try:
            if limits.workspace_bytes is not None:
                self._quota = mounts.QuotaFS.attach(self.workspace, limits.workspace_bytes, limits.workspace_inodes)
            if self.isolation == "bwrap" and mounts.can_view():
                self._view = mounts.SystemView(*fs.view_parts(self.ro_binds))
        except OSError as e:
            self.close()
            raise SandboxError(f"cannot mount the sandbox's own file systems for {self.workspace}: {e}") from e
        self._finalizer = weakref.finalize(self, _unmount, self._quota, self._view)

    def close(self) -> None:
        """Unmount the workspace's tmpfs (its files stay in the folder) and the system view; idempotent."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()
        else:
            _unmount(self._quota, self._view)
        self._quota = self._view = None

    @property
    def quota(self) -> str:
        """How the workspace is bounded: "tmpfs" (kernel-enforced), "walk" (polled) or "none"."""
        if self._quota is not None:
            return "tmpfs"
        return "none" if self.limits.workspace_bytes is None else "walk"

    @property
    def sealed(self) -> bool:
        """True only for bwrap: the host file system outside the binds is invisible."""
        return self.isolation == "bwrap"

    def _choose(self, isolation: Isolation, allow_unsafe: bool) -> str:
        helpers = ["prlimit"] + (["setpriv"] if self.as_root else [])  # util-linux, used inside
        have = all(shutil.which(h) for h in helpers)
        if isolation in ("auto", "bwrap") and bwrap_works():
            return "bwrap"
        if isolation in ("auto", "unshare") and have and unshare_available():
            return "unshare"
        if isolation == "none" and allow_unsafe:
            return "none"
        if isolation == "auto" and allow_unsafe:
            return "none"
        if isolation == "none":
            raise SandboxUnavailable("isolation='none' runs model output unisolated; pass allow_unsafe=True to mean it")
        raise SandboxUnavailable(
            f"no working isolation for isolation={isolation!r} (bwrap with a seccomp filter for this "
            f"architecture, or unshare, plus {' and '.join(helpers)} from util-linux); install bubblewrap, "
            "or pass allow_unsafe=True to run without isolation")

    # ----- command line -----

    def _inner(self, argv: list[str], lim: Limits, ident: tuple[int, int] | None) -> list[str]:
        """setpriv (as root) and prlimit in front of the command: both run inside the namespaces."""
        address_space = "unlimited" if lim.memory_bytes is None else lim.memory_bytes
        rlimits = ["prlimit", f"--cpu={lim.cpu_s}:{lim.cpu_s + 1}", f"--as={address_space}",
                   f"--nproc={lim.nproc}", f"--fsize={lim.fsize_bytes}", f"--nofile={lim.nofile}",
                   "--core=0", "--"]
        drop = []
        if ident is not None:
            drop = ["setpriv", f"--reuid={ident[0]}", f"--regid={ident[1]}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        return drop + rlimits + argv

    def _bwrap_argv(self, argv: list[str], lim: Limits, ident: tuple[int, int] | None,
                    fds: dict[str, int]) -> list[str]:
        out = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--info-fd", str(fds["info"]),
               "--seccomp", str(fds["seccomp"])]
        if self.as_root:  # only to let setpriv switch uid; setpriv then drops every capability
            out += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            out += ["--unshare-user"]
        source = self._view.source if self._view is not None else (lambda p: p)
        out += fs.root_fs_args(id_files=False, source=source)
        for name in ("passwd", "group"):  # the host's entries plus one naming the run's uid
            out += ["--perms", "0644", "--ro-bind-data", str(fds[name]), f"/etc/{name}"]
        out += ["--proc", "/proc", "--dev", "/dev", *(self._view.dev_args() if self._view is not None else []),
                "--perms", "1777", "--size", str(lim.tmp_bytes), "--tmpfs", "/tmp"]
        out += fs.bwrap_binds(self.workspace, self.ro_binds, self.hide, source)
        out += ["--chdir", MOUNT_POINT,
                "--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", MOUNT_POINT,
                "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
                "--hostname", "sandbox", "--", "/bin/sh", "-c", _started_script(fds["started"]), "sh"]
        return out + self._inner(argv, lim, ident)

    def _unshare_argv(self, argv: list[str], lim: Limits, ident: tuple[int, int] | None, started_fd: int) -> list[str]:
        # World-writable host dirs get a private tmpfs so the sandbox uid cannot leave files on
        # the host; rlyard's package, the cache and `hide` are masked where that is possible.
        private = tuple(d for d in ("/tmp", "/var/tmp", "/dev/shm") if os.path.isdir(d))
        mounts = "; ".join(f"mount -t tmpfs -o size={lim.tmp_bytes} tmpfs {d}" for d in private)
        masks = fs.unshare_mask_script(self.workspace, self.ro_binds, self.hide, covered=private)
        if masks:
            mounts = f"{mounts} && {masks}" if mounts else masks
        user = [] if self.as_root else ["--user", "--map-root-user"]
        return ["unshare", *user, "--fork", "--kill-child", "--pid", "--mount-proc", "--net", "--ipc",
                "--uts", "--mount", "--propagation", "private", "--",
                "/bin/sh", "-c", f'{mounts} || exit 125; ' + _started_script(started_fd), "sh",
                *self._inner(argv, lim, ident)]

    def _unsafe_argv(self, argv: list[str], lim: Limits) -> list[str]:
        # allow_unsafe: no namespaces and no uid change, but the rlimits still apply.
        inner = self._inner(argv, lim, None)
        return inner if shutil.which("prlimit") else argv

    def _env(self) -> dict[str, str]:
        return {"PATH": PATH, "HOME": str(self.workspace), "LANG": "C.UTF-8", "TMPDIR": "/tmp"}

    def _chown_workspace(self, uid: int, gid: int) -> None:
        """Give the workspace to the run's uid without following links out of it.

        Files with several hard links are skipped (one could be a host file linked in) unless
        an earlier run made them: owned by a uid of the pool.
        """
        pool = self.uid_pool or default_pool()
        for root, dirs, files in os.walk(self.workspace):
            for name in [*dirs, *files, None]:
                path = root if name is None else os.path.join(root, name)
                st = os.lstat(path)
                if (st.st_uid, st.st_gid) != (uid, gid) and (
                        st.st_nlink == 1 or stat.S_ISDIR(st.st_mode) or pool.owns(st.st_uid)):
                    os.chown(path, uid, gid, follow_symlinks=False)

    def _lease(self) -> UidLease | None:
        if not self.as_root or self.isolation == "none" or self.uid is not None:
            return None
        try:
            return (self.uid_pool or default_pool()).acquire()
        except (UidPoolExhausted, OSError) as e:
            raise SandboxError(f"no sandbox uid: {e}") from e

    # ----- running -----

    def run(self, command: str | list[str], timeout_s: float | None = None,
            stdin: bytes | str | None = None, limits: Limits | None = None) -> Result:
        """Run `command` (a shell string for /bin/sh -c, or an argv list) in the workspace.

        `limits` replaces the sandbox's limits for this run only; `timeout_s` can only shorten
        the wall time of whichever limits apply.
        """
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("empty command")
        if isinstance(stdin, str):
            stdin = stdin.encode()
        lim = limits or self.limits
        wall = lim.wall_s if timeout_s is None else min(timeout_s, lim.wall_s)
        lease = self._lease()
        try:
            ident = None
            if lease is not None:
                ident = (lease.uid, lease.gid)
            elif self.as_root and self.isolation != "none":
                ident = (self.uid, self.gid)
            if ident is not None:
                self._chown_workspace(*ident)
            return self._run(argv, stdin, lim, wall, ident)
        finally:
            if lease is not None:  # only after the namespace is gone: nothing runs as this uid
                lease.release()

    def _run(self, argv: list[str], stdin: bytes | None, lim: Limits, wall: float,
             ident: tuple[int, int] | None) -> Result:
        fds: dict[str, int] = {}
        started_r = info_r = -1
        group = self._cgroup(lim)
        usage = None
        try:
            started_r, fds["started"] = os.pipe()
            info_r, fds["info"] = os.pipe()
            if self.isolation == "bwrap":
                fds["seccomp"] = seccomp.program_fd()
                uid, gid = ident if ident is not None else (os.getuid(), os.getgid())
                for path, data in fs.identity_files(uid, gid).items():
                    fds[Path(path).name] = seccomp.data_fd(f"rlyard{path.replace('/', '-')}", data)
                full, env, cwd = self._bwrap_argv(argv, lim, ident, fds), self._env(), "/"
            elif self.isolation == "unshare":
                full, env, cwd = self._unshare_argv(argv, lim, ident, fds["started"]), self._env(), str(self.workspace)
            else:
                full, env, cwd = self._unsafe_argv(argv, lim), self._env(), str(self.workspace)
            if group is not None:
                full = group.enter_argv(full)
            polled = lim.workspace_bytes is not None and self._quota is None  # a tmpfs says ENOSPC by itself
            disk = DiskWatch(self.workspace, lim.workspace_bytes) if polled else None
            t0 = time.monotonic()
            try:
                proc = subprocess.Popen(
                    full, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
                    start_new_session=True, pass_fds=tuple(fds.values()),
                    # a single prctl call, resolved before the fork: safe with threads
                    preexec_fn=_die_with_parent if self.isolation == "unshare" else None)  # noqa: PLW1509
            except OSError as e:
                raise SandboxError(f"cannot start {full[0]}: {e}") from e
            for name in list(fds):
                os.close(fds.pop(name))
            out = Capture(proc, stdin, lim, self.isolation != "none", disk, group.out_of_memory if group else None)
            reason = out.pump(t0 + wall)
            duration = time.monotonic() - t0
            started = read_all(started_r)
            if self.isolation == "bwrap":
                try:
                    wait_namespace_gone(read_all(info_r))
                except TeardownError as e:
                    raise SandboxError(str(e)) from e
            if group is not None:
                usage = group.usage(reason == "memory")
        finally:
            for fd in (started_r, info_r, *fds.values()):
                if fd >= 0:
                    os.close(fd)
            if group is not None:
                group.close()
        code = proc.returncode if reason is None else -signal.SIGKILL  # we killed it: say so uniformly
        if reason is None:
            self._check_started(code, started, out.err)
        if reason is None and code > 128:
            reason = {signal.SIGXCPU: "cpu_time", signal.SIGXFSZ: "file_size"}.get(code - 128, None)
            if reason is None and code - 128 == signal.SIGKILL:
                reason = "signal"
        if reason is None and usage is not None and usage.out_of_memory:
            reason = "memory"  # v2's group OOM kill, which ends the run before the loop sees it
        return Result(exit_code=code, stdout=bytes(out.out), stderr=bytes(out.err),
                      timed_out=reason == "wall_time", killed_reason=reason,
                      truncated=out.truncated, duration_s=duration,
                      limited_by=f"cgroup {group.backend.version}" if group is not None else "rlimits",
                      forks_refused=usage.pids_refused if usage else 0)

    def _cgroup(self, lim: Limits) -> cgroups.SandboxCgroup | None:
        """The run's own cgroup, where the machine has cgroups (else the rlimits alone)."""
        found = cgroups.backend() if lim.cgroup else None
        if found is None:
            return None
        try:
            return cgroups.SandboxCgroup(found, lim.sandbox_memory(), lim.nproc + cgroups.SANDBOX_PIDS, lim.cpus)
        except OSError as e:
            raise SandboxError(f"cannot make the sandbox's cgroup under {found.describe()}: {e}") from e

    def _check_started(self, code: int, started: bytes, stderr: bytearray) -> None:
        """No byte on the started pipe means the namespaces or mounts failed before the command ran.

        The byte is written inside the sandbox, still as root, before the command starts, so a
        hostile command cannot fake an infra failure by printing "bwrap: ..." and exiting 1.
        """
        if self.isolation != "none" and not started:
            raise SandboxError(f"{self.isolation} could not start the sandbox (exit {code}): "
                               f"{bytes(stderr[-2000:]).decode(errors='replace').strip()}")


def _unmount(quota: mounts.QuotaFS | None, view: mounts.SystemView | None) -> None:
    if view is not None:
        view.close()
    if quota is not None:
        quota.release()


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: no dlopen in the forked child


def _die_with_parent() -> None:
    # unshare has no --die-with-parent: SIGKILL it if rlyard dies; --kill-child does the rest.
    _PRCTL(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def _started_script(fd: int) -> str:
    # Through /proc because dash cannot redirect to a two-digit fd; runs before the uid drop.
    return f'printf . > /proc/self/fd/{fd} || exit 125; exec "$@"'
