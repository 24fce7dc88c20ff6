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
enters the cgroups, hands the profile folder to the uid and execs
`unshare --net setpriv ... chromium` with Playwright's own arguments (the pipe fds pass through).
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
from pathlib import Path

from rlyard.sandbox.cgroups import SandboxCgroup, backend
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
        out = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and entry.stat().st_uid == self.lease.uid:
                    out.append(int(entry.name))
            except OSError:
                continue
        return out

    def _rss(self) -> int:
        total = 0
        for pid in self.pids_in():
            try:
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, ValueError, IndexError):
                continue
        return total

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
        for _ in range(50):
            pids = self.pids_in()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self._closed.wait(0.02)

    def close(self) -> None:
        self._closed.set()
        self.kill()
        if self.cgroup is not None:
            self.cgroup.close()
        if self.lease is not None:
            self.lease.release()
        shutil.rmtree(self.folder, ignore_errors=True)
