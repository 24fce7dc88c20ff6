"""Run untrusted commands (model output) in an isolated, resource-limited child process.

Isolation, best first: bubblewrap (new mount/pid/net/ipc/uts namespaces, a minimal read-only
root, only the workspace writable), then `unshare` (namespaces and rlimits, but the host file
system stays visible, read-only for the sandbox uid except world-writable places that get a
private tmpfs). With neither, `run` refuses unless `allow_unsafe=True` was passed.

Why the child is a real unprivileged uid rather than "uid 65534 in a user namespace": when the
parent is root, bwrap's user namespace maps the sandbox uid onto host uid 0, and the kernel
never enforces RLIMIT_NPROC for host uid 0, so a fork bomb would not be contained. As root we
therefore enter the namespaces as root and drop to `uid` with setpriv (no capabilities, empty
bounding set, no_new_privs) before the command starts. As a normal user bwrap's user namespace
keeps the caller's own uid, which the kernel does limit.
"""
from __future__ import annotations

import ctypes
import json
import os
import selectors
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Isolation = Literal["auto", "bwrap", "unshare", "none"]

MOUNT_POINT = "/workspace"  # where the workspace appears inside bwrap (the command's cwd)
ROOT_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64")  # symlinks into /usr on merged-/usr hosts
ETC_FILES = (  # the minimum that libc, python and Debian's /usr/bin symlinks need
    "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ld.so.cache",
    "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives",
)
PATH = "/usr/local/bin:/usr/bin:/bin"
CHUNK = 65536


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start, bad setup): an infra failure, not the policy's."""


class SandboxUnavailable(SandboxError):
    """No isolation mechanism is available and `allow_unsafe` was not given."""


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits; every process in the sandbox gets the rlimits."""

    wall_s: float = 30.0  # wall-clock time; the whole sandbox is killed after it
    cpu_s: int = 30  # RLIMIT_CPU per process (SIGXCPU, then SIGKILL one second later)
    memory_bytes: int = 1 << 30  # RLIMIT_AS per process (address space, not RSS)
    nproc: int = 64  # RLIMIT_NPROC: processes + threads of the sandbox uid
    fsize_bytes: int = 64 << 20  # RLIMIT_FSIZE: largest file a process may write (SIGXFSZ)
    nofile: int = 256  # RLIMIT_NOFILE: open file descriptors per process
    output_bytes: int = 1 << 20  # bytes kept per stream (stdout, stderr); the rest is dropped
    output_kill_bytes: int = 64 << 20  # a stream that produces more than this gets the run killed
    tmp_bytes: int = 64 << 20  # size of the private tmpfs on /tmp (bwrap)


@dataclass(frozen=True)
class Result:
    """What one `Sandbox.run` produced."""

    exit_code: int  # the command's exit status; 128 + N when killed by signal N, -9 when we killed it
    stdout: bytes  # at most `Limits.output_bytes`
    stderr: bytes  # at most `Limits.output_bytes`
    timed_out: bool  # the wall-time limit (or `timeout_s`) was reached
    killed_reason: str | None  # "wall_time" | "cpu_time" | "file_size" | "output_limit" | "signal" | None
    truncated: bool  # some output beyond `output_bytes` was dropped
    duration_s: float  # wall-clock seconds from start to the end of the run

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
        ["bwrap", "--unshare-pid", "--unshare-net", *_root_fs_args(), "--proc", "/proc", "--dev", "/dev",
         *([] if os.geteuid() == 0 else ["--unshare-user"]), "--", "/bin/echo", "ok"])


def unshare_available() -> bool:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return shutil.which("unshare") is not None and _probe(
        ["unshare", *user, "--fork", "--pid", "--net", "--mount", "--", "/bin/echo", "ok"])


def _root_fs_args() -> list[str]:
    # /etc is made first, world-readable: bwrap would create it 0700 for root, which the
    # sandbox uid could not enter (git then fails on /etc/gitconfig, libc on ld.so.cache).
    args = ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]
    for path in ROOT_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    return args


class Sandbox:
    """Runs commands with `workspace` as the only writable directory and as the cwd.

    `uid`/`gid`: the unprivileged identity commands run as when the caller is root (the
    workspace is chowned to it before each run). Sandboxes that run at the same time with the
    same uid share the `nproc` budget, because the kernel counts processes per uid.
    """

    def __init__(self, workspace: Path, limits: Limits = Limits(), isolation: Isolation = "auto",
                 allow_unsafe: bool = False, uid: int = 65534, gid: int = 65534):
        self.workspace = Path(workspace).resolve()
        if not self.workspace.is_dir():
            raise SandboxError(f"workspace {self.workspace} is not a directory")
        self.limits = limits
        self.uid, self.gid = uid, gid
        self.as_root = os.geteuid() == 0
        self.isolation = self._choose(isolation, allow_unsafe)

    def _choose(self, isolation: Isolation, allow_unsafe: bool) -> str:
        helpers = ["prlimit"] + (["setpriv"] if self.as_root else [])  # util-linux, used inside
        have = all(shutil.which(h) for h in helpers)
        if isolation in ("auto", "bwrap") and have and bwrap_available():
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
            f"no working isolation for isolation={isolation!r} (bwrap or unshare, plus {' and '.join(helpers)} "
            "from util-linux); install bubblewrap, "
            "or pass allow_unsafe=True to run without isolation")

    # ----- command line -----

    def _inner(self, argv: list[str]) -> list[str]:
        """setpriv (as root) and prlimit in front of the command: both run inside the namespaces."""
        lim = self.limits
        rlimits = ["prlimit", f"--cpu={lim.cpu_s}:{lim.cpu_s + 1}", f"--as={lim.memory_bytes}",
                   f"--nproc={lim.nproc}", f"--fsize={lim.fsize_bytes}", f"--nofile={lim.nofile}",
                   "--core=0", "--"]
        drop = []
        if self.as_root:
            drop = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        return drop + rlimits + argv

    def _bwrap_argv(self, argv: list[str], started_fd: int, info_fd: int) -> list[str]:
        out = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--info-fd", str(info_fd)]
        if self.as_root:  # only to let setpriv switch uid; setpriv then drops every capability
            out += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            out += ["--unshare-user"]
        out += _root_fs_args()
        out += ["--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", str(self.limits.tmp_bytes), "--tmpfs", "/tmp",
                "--bind", str(self.workspace), MOUNT_POINT, "--chdir", MOUNT_POINT,
                "--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", MOUNT_POINT,
                "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
                "--hostname", "sandbox", "--", "/bin/sh", "-c", _started_script(started_fd), "sh"]
        return out + self._inner(argv)

    def _unshare_argv(self, argv: list[str], started_fd: int) -> list[str]:
        # World-writable host dirs get a private tmpfs so "nobody" cannot leave files on the host.
        mounts = "; ".join(f"mount -t tmpfs -o size={self.limits.tmp_bytes} tmpfs {d}"
                           for d in ("/tmp", "/var/tmp", "/dev/shm") if os.path.isdir(d))
        user = [] if self.as_root else ["--user", "--map-root-user"]
        return ["unshare", *user, "--fork", "--kill-child", "--pid", "--mount-proc", "--net", "--ipc",
                "--uts", "--mount", "--propagation", "private", "--",
                "/bin/sh", "-c", f'{mounts} || exit 125; ' + _started_script(started_fd), "sh", *self._inner(argv)]

    def _unsafe_argv(self, argv: list[str]) -> list[str]:
        # allow_unsafe: no namespaces and no uid change, but the rlimits still apply.
        inner = self._inner(argv)
        return inner[inner.index("prlimit"):] if shutil.which("prlimit") else argv

    def _env(self) -> dict[str, str]:
        return {"PATH": PATH, "HOME": str(self.workspace), "LANG": "C.UTF-8", "TMPDIR": "/tmp"}

    def _chown_workspace(self) -> None:
        """Give the workspace to the sandbox uid without following links out of it.

        Files with several hard links are skipped: one could be a host file linked in.
        """
        if not self.as_root or self.isolation == "none":
            return
        for root, dirs, files in os.walk(self.workspace):
            for name in [*dirs, *files, None]:
                path = root if name is None else os.path.join(root, name)
                st = os.lstat(path)
                if st.st_uid != self.uid and (st.st_nlink == 1 or stat.S_ISDIR(st.st_mode)):
                    os.chown(path, self.uid, self.gid, follow_symlinks=False)

    # ----- running -----

    def run(self, command: str | list[str], timeout_s: float | None = None,
            stdin: bytes | str | None = None) -> Result:
        """Run `command` (a shell string for /bin/sh -c, or an argv list) in the workspace."""
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("empty command")
        if isinstance(stdin, str):
            stdin = stdin.encode()
        wall = self.limits.wall_s if timeout_s is None else min(timeout_s, self.limits.wall_s)
        self._chown_workspace()
        started_r, started_w = os.pipe()
        info_r, info_w = os.pipe()
        try:
            if self.isolation == "bwrap":
                full, env, cwd = self._bwrap_argv(argv, started_w, info_w), self._env(), "/"
            elif self.isolation == "unshare":
                full, env, cwd = self._unshare_argv(argv, started_w), self._env(), str(self.workspace)
            else:
                full, env, cwd = self._unsafe_argv(argv), self._env(), str(self.workspace)
            t0 = time.monotonic()
            try:
                proc = subprocess.Popen(
                    full, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
                    start_new_session=True, pass_fds=(started_w, info_w),
                    # a single prctl call, resolved before the fork: safe with threads
                    preexec_fn=_die_with_parent if self.isolation == "unshare" else None)  # noqa: PLW1509
            except OSError as e:
                raise SandboxError(f"cannot start {full[0]}: {e}") from e
            os.close(started_w)
            os.close(info_w)
            started_w = info_w = -1
            out = _Capture(proc, stdin, self.limits, self.isolation != "none")
            reason = out.pump(t0 + wall)
            duration = time.monotonic() - t0
            started = _read_all(started_r)
            if self.isolation == "bwrap":
                _wait_namespace_gone(_read_all(info_r))
        finally:
            for fd in (started_r, started_w, info_r, info_w):
                if fd >= 0:
                    os.close(fd)
        code = proc.returncode if reason is None else -signal.SIGKILL  # we killed it: say so uniformly
        if reason is None:
            self._check_started(code, started, out.err)
        if reason is None and code > 128:
            reason = {signal.SIGXCPU: "cpu_time", signal.SIGXFSZ: "file_size"}.get(code - 128, None)
            if reason is None and code - 128 == signal.SIGKILL:
                reason = "signal"
        return Result(exit_code=code, stdout=bytes(out.out), stderr=bytes(out.err),
                      timed_out=reason == "wall_time", killed_reason=reason,
                      truncated=out.truncated, duration_s=duration)

    def _check_started(self, code: int, started: bytes, stderr: bytearray) -> None:
        """No byte on the started pipe means the namespaces or mounts failed before the command ran.

        The byte is written inside the sandbox, still as root, before the command starts, so a
        hostile command cannot fake an infra failure by printing "bwrap: ..." and exiting 1.
        """
        if self.isolation != "none" and not started:
            raise SandboxError(f"{self.isolation} could not start the sandbox (exit {code}): "
                               f"{bytes(stderr[-2000:]).decode(errors='replace').strip()}")


def _wait_namespace_gone(info: bytes, timeout_s: float = 5.0) -> None:
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
        try:
            line = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        comm, state = line[line.index("(") + 1:line.rindex(")")], line[line.rindex(")") + 2]
        if comm != "bwrap" or state in "ZX":
            return
        time.sleep(0.005)
    raise SandboxError(f"sandbox namespace (init pid {pid}) still alive {timeout_s}s after the run")


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids += [int(k) for k in task.read_text().split()]
        except OSError:
            pass
    return kids


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: no dlopen in the forked child


def _die_with_parent() -> None:
    # unshare has no --die-with-parent: SIGKILL it if rlyard dies; --kill-child does the rest.
    _PRCTL(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def _started_script(fd: int) -> str:
    # Through /proc because dash cannot redirect to a two-digit fd; runs before the uid drop.
    return f'printf . > /proc/self/fd/{fd} || exit 125; exec "$@"'


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, CHUNK)
    except BlockingIOError:
        return b""


class _Capture:
    """Feeds stdin and reads stdout/stderr incrementally, keeping at most `output_bytes` each."""

    def __init__(self, proc: subprocess.Popen, stdin: bytes | None, limits: Limits, namespaced: bool):
        self.proc, self.limits, self.namespaced = proc, limits, namespaced
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
