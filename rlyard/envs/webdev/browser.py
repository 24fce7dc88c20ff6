"""Where the grader's Chromium runs: a box of its own, like a sandbox.

A page is the policy's code, so the browser that runs it is held the way a sandbox is:

- **its own uid** from the sandbox uid pool (when rlyard runs as root), with no capabilities
  and Chromium's own sandbox on (renderers in their own namespaces under seccomp) where the
  kernel lets an unprivileged user make namespaces; as another user, a user namespace maps it;
- **its own network namespace** holding only a loopback that is down: the site reaches the
  browser through Playwright's routes over the DevTools pipe, never a socket, so WebRTC (UDP),
  WebSockets, fetch, beacons and name lookups from the page have nowhere to go, whatever
  Chromium's proxy and resolver flags do or do not cover;
- **a memory and pid cgroup** (the sandbox's cgroup backend: v2, else v1) for the whole
  process tree; where no cgroup can be made, RLIMIT_NPROC on the leased uid and a watchdog
  summing that uid's RSS (logged once). A watchdog thread sees the limit reached and kills the
  box; the page scores 0 with the reason and the worker's next page gets a fresh browser.

Playwright launches `BrowserBox.executable`, a small shell script in a root-only folder that
enters the cgroups, hands the profile folder to the uid, writes its pid and execs
`unshare --net setpriv ... chromium` with Playwright's own arguments (the pipe fds pass through).

A browser is ended by `BrowserBox.kill` first, Playwright's `browser.close()` after: that call
waits, with no timeout, until every process holding the browser's stdout and stderr has exited,
and every Chromium child (zygotes, renderers, crash handlers) inherits them; so a process that
outlived its browser (a renderer whose page never yields, were Chromium not to end it) would keep
the caller waiting and itself spinning. See `BrowserBox.kill` for how the processes are found.
"""
from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from rlyard.sandbox.cgroups import SandboxCgroup, backend
from rlyard.sandbox.procfs import all_pids, proc_stat, real_uid, rss_bytes
from rlyard.sandbox.uids import UidLease, default_pool

log = logging.getLogger("rlyard.envs.webdev")

MEMORY_BYTES = int(os.environ.get("RLYARD_WEBDEV_BROWSER_MEMORY", str(3 << 29)))  # 1.5 GiB per browser tree
PIDS = 2048  # tasks (threads count in cgroup v1): Chromium idles at about 150
POLL_S = 0.05

_probe_lock = threading.Lock()
_probed: dict[str, tuple[bool, str]] = {}


def _probe(name: str, argv: list[str]) -> tuple[bool, str]:
    """Does `argv` run here (once per process, logged when it does not)?"""
    with _probe_lock:
        if name not in _probed:
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
                _probed[name] = (done.returncode == 0, (done.stderr or done.stdout).strip()[-300:])
            except (OSError, subprocess.TimeoutExpired) as error:
                _probed[name] = (False, str(error))
            if not _probed[name][0]:
                log.warning("webdev browser: %s unavailable (%s)", name, _probed[name][1])
        return _probed[name]


def netns_prefix() -> list[str]:
    """The command that puts Chromium in a network namespace of its own; [] where none can be made."""
    unshare = shutil.which("unshare")
    if unshare is None:
        _probe("a network namespace", ["false"])
        return []
    prefix = [unshare, "--net"] if os.geteuid() == 0 else [unshare, "--user", "--map-current-user", "--net"]
    return prefix if _probe("a network namespace", [*prefix, "--", "true"])[0] else []


def sandbox_usable() -> bool:
    """Chromium's own (namespace) sandbox: used unless a launch with it failed (`sandbox_failed`)."""
    return _probed.get("chromium-sandbox", (True, ""))[0]


def sandbox_failed(error: str) -> None:
    with _probe_lock:
        _probed["chromium-sandbox"] = (False, error)
    log.warning("webdev browser: Chromium's own sandbox would not start, running with --no-sandbox inside the box (%s)",
                error.splitlines()[0][:300] if error else "")


class BrowserBox:
    """One browser launch's isolation: a leased uid, a cgroup, the wrapper script, the watchdog."""

    def __init__(self, chromium: str, memory_bytes: int = MEMORY_BYTES, pids: int = PIDS):
        self.memory_bytes, self.pids = memory_bytes, pids
        self.folder = Path(tempfile.mkdtemp(prefix="rlyard-webdev-browser-"))
        self.lease: UidLease | None = default_pool().acquire() if os.geteuid() == 0 else None
        self.cgroup: SandboxCgroup | None = None
        self.reason = ""  # why the watchdog killed this box ("" while it has not)
        self._browser_pid: int | None = None
        self.driver_pid: int | None = None  # Playwright's node driver, the browser's parent (`launched`)
        self._closed = threading.Event()
        found = backend()
        try:
            if found is not None:
                self.cgroup = SandboxCgroup(found, memory_bytes, pids, None)
        except OSError as error:
            log.warning("webdev browser: no cgroup (%s); rlimits and an RSS watchdog instead", error)
        self.isolation = self._describe()
        self.executable = self._write_wrapper(chromium)
        threading.Thread(target=self._watch, daemon=True, name="rlyard-webdev-browser-watchdog").start()

    def _describe(self) -> dict:
        return {"uid": self.lease.uid if self.lease else os.geteuid(), "netns": bool(netns_prefix()),
                "cgroup": self.cgroup.backend.version if self.cgroup else "", "memory_bytes": self.memory_bytes,
                "pids": self.pids, "chromium_sandbox": sandbox_usable()}

    def _write_wrapper(self, chromium: str) -> str:
        lines = ["#!/bin/sh"]
        if self.cgroup is not None:
            moves = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in dict.fromkeys(self.cgroup.dirs.values()))
            lines.append(f"{{ {moves}; }} || exit 125")
        run = [*netns_prefix(), "--"] if netns_prefix() else []
        if self.lease is not None:
            uid = self.lease.uid
            lines += ['profile=""', 'for a in "$@"; do case "$a" in --user-data-dir=*) profile="${a#--user-data-dir=}";; esac; done',
                      f'[ -n "$profile" ] && chown -R {uid}:{uid} "$profile" || exit 126',
                      'export HOME="$profile" XDG_CONFIG_HOME="$profile/.config" XDG_CACHE_HOME="$profile/.cache"']
            if self.cgroup is None:
                run += [shutil.which("prlimit") or "prlimit", f"--nproc={self.pids}:{self.pids}", "--"]
            run += [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "--inh-caps=-all", "--"]
        # the pid Chromium will have: unshare (without --fork), prlimit and setpriv all exec
        lines.append(f"echo $$ > {shlex.quote(str(self.folder / 'pid'))}")
        lines.append("exec " + " ".join(shlex.quote(a) for a in [*run, chromium]) + ' "$@"')
        path = self.folder / "chromium"
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o700)
        return str(path)

    def pids_in(self) -> list[int]:
        """The processes of this box: its cgroup's, else its uid's."""
        if self.cgroup is not None:
            folder = self.cgroup.dirs["pids"]
            try:
                return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
            except OSError:
                return []
        if self.lease is None:
            return []
        return [pid for pid in all_pids() if real_uid(pid) == self.lease.uid]

    def browser_pid(self) -> int | None:
        """Chromium's main process (the pid the wrapper wrote before exec), once launched."""
        if self._browser_pid is None:
            try:
                self._browser_pid = int((self.folder / "pid").read_text())
            except (OSError, ValueError):
                return None
        return self._browser_pid

    def launched(self) -> None:
        """Note the browser's pid and its parent, Playwright's driver (see `kill_child`), after a launch."""
        pid = self.browser_pid()
        found = proc_stat(pid) if pid is not None else None
        self.driver_pid = found.ppid if found is not None else None

    def session_pids(self) -> list[int]:
        """The live processes of the browser's session that run as the box's uid.

        Playwright spawns the browser detached (setsid): its session id is its pid, and every
        Chromium child that does not start a session of its own (zygotes, renderers, utility
        processes) keeps it, whatever namespaces it is in. This finds them where the box has no
        cgroup and no uid of its own (rlyard not root, no cgroup). A pid is not reused while a
        session of that number has a member, and only the box's uid is counted."""
        sid = self.browser_pid()
        if sid is None:
            return []
        uid = self.lease.uid if self.lease is not None else os.geteuid()
        return [pid for pid, session, state in _processes() if session == sid and state != "Z" and real_uid(pid) == uid]

    def _rss(self) -> int:
        return sum(rss_bytes(pid) for pid in self.pids_in())

    def over_limit(self) -> str:
        """Why this box is over a limit now, or ""."""
        if self.cgroup is not None:
            usage = self.cgroup.usage(False)
            if usage.out_of_memory:
                return f"the page passed the browser's memory limit ({self.memory_bytes >> 20} MiB)"
            if usage.pids_refused:
                return f"the page passed the browser's process limit ({self.pids} tasks)"
            return ""
        if self.lease is not None and self._rss() > self.memory_bytes:
            return f"the page passed the browser's memory limit ({self.memory_bytes >> 20} MiB, RSS watchdog)"
        return ""

    def _watch(self) -> None:
        while not self._closed.wait(POLL_S):
            reason = self.over_limit()
            if reason:
                self.reason = reason
                self.kill()
                return

    def kill(self) -> None:
        """SIGKILL every process of the box until none is left (up to about 1 s).

        Found three ways, so that a page that never yields cannot keep one alive: the box's
        cgroup (every descendant, whatever it does; where one exists), the leased uid (rlyard as
        root: only this box runs as it) and the browser's session (`session_pids`: the way left
        where neither exists). Playwright's `browser.close()` returns once all are gone."""
        for _ in range(50):
            pids = [pid for pid in set(self.pids_in()) | set(self.session_pids()) if getattr(proc_stat(pid), "state", "Z") != "Z"]
            if not pids:  # (a zombie is dead already: its parent has not reaped it yet)
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)  # not self._closed.wait: once closed, that returns at once

    def close(self) -> None:
        self._closed.set()
        self.kill()
        if self.cgroup is not None:
            self.cgroup.close()
        if self.lease is not None:
            self.lease.release()
        shutil.rmtree(self.folder, ignore_errors=True)


def kill_child(pid: int | None) -> None:
    """SIGKILL `pid` if it is still a child of this process (Playwright's node driver, say)."""
    found = proc_stat(pid) if pid else None
    if pid and found is not None and found.ppid == os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _processes() -> list[tuple[int, int, str]]:
    """(pid, session id, state) of every process in /proc."""
    return [(pid, found.session, found.state) for pid in all_pids() if (found := proc_stat(pid)) is not None]
