"""Host-side mounts a sandbox owns for its lifetime: the workspace's own size- and inode-limited
tmpfs, and a private view of the system tree (issue 36).

Why a tmpfs at the workspace's own path rather than a limit inside bwrap: graders read the
workspace between calls and after the episode, at its host path; a file system mounted there on
the host keeps those reads working while the kernel refuses every byte and inode past the quota
(ENOSPC in the command's own output, within one call and across calls). The files already in
the folder are copied in when it is mounted and copied back out by `close` (special files are
left out, setuid bits cleared), so a `Sandbox` made for one command leaves its results behind.

Why a private view: every sandbox bound the same /usr, /etc files and /dev nodes, and a lock
on one of them (flock, POSIX, OFD) is a bit another sandbox can read. Locks live on inodes, and
each overlay mount has inodes of its own: /usr seen through a sandbox's own read-only overlay,
/etc's few files as private copies and /dev's nodes made afresh give every sandbox locks nobody
else can see, while the page cache stays shared (overlayfs reads the lower files).

Both need mount(2) on the host (root); elsewhere the caller falls back (the walk of
`capture.DiskWatch`, shared binds), and one log line says so.
"""
from __future__ import annotations

import ctypes
import itertools
import logging
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

log = logging.getLogger("rlyard.sandbox")

_libc = ctypes.CDLL(None, use_errno=True)
MS_NOSUID, MS_NODEV, MS_RDONLY, MNT_DETACH = 2, 4, 1, 2
PREFIX = "rlyard-ws"
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
VIEW_ROOTS = (Path("/run/rlyard-views"), Path(tempfile.gettempdir()) / f"rlyard-views-{os.geteuid()}")
_counter = itertools.count()
_lock = threading.Lock()
_can_mount: list[bool] = []
_can_view: list[bool] = []
_live: dict[str, "QuotaFS"] = {}  # workspace path -> its mounted file system


def _mount(source: str, target: str, fstype: str, flags: int, data: str) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode(), flags, data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype} on {target}: {os.strerror(err)}")


def _detach(target: str) -> None:
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def can_mount() -> bool:
    """Can this process mount file systems on the host (root with CAP_SYS_ADMIN)? Probed once, logged."""
    with _lock:
        if not _can_mount:
            why = "RLYARD_SANDBOX_WORKSPACE_FS=0" if os.environ.get("RLYARD_SANDBOX_WORKSPACE_FS") == "0" else _probe()
            _can_mount.append(why is None)
            if why is None:
                log.info("sandbox workspace quota: a tmpfs per workspace (size=, nr_inodes=)")
                _sweep()
            else:
                log.info("sandbox workspace quota: periodic walk of the workspace (no tmpfs: %s); "
                         "system tree: shared binds", why)
        return _can_mount[0]


def can_view() -> bool:
    """Can a private view of the system tree be made here (mounts, overlayfs)? Probed once, logged."""
    if not can_mount():
        return False
    with _lock:
        if not _can_view:
            try:
                SystemView(["/usr"], []).close()
                _can_view.append(True)
                log.info("sandbox system tree: a private overlay view per sandbox (locks private)")
            except OSError as e:
                _can_view.append(False)
                log.warning("sandbox system tree: shared binds, locks on it shared between sandboxes "
                            "(no private view: %s)", e)
        return _can_view[0]


def _probe() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    where = tempfile.mkdtemp(prefix="rlyard-mount-probe-")
    try:
        _mount("rlyard-probe", where, "tmpfs", MS_NOSUID | MS_NODEV, "size=4096,nr_inodes=16")
        _detach(where)
        return None
    except OSError as e:
        return str(e)
    finally:
        os.rmdir(where)


def _sweep() -> None:
    """Mounts left by an rlyard process that was killed (SIGKILL skips `close`): files copied
    back out, views dropped."""
    for source, target in _own_mounts():
        pid = source.split("-")[2] if source.count("-") >= 3 else ""
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                if source.startswith(PREFIX + "-"):
                    _unmount_keeping(target)
                else:
                    _detach(target)
            except OSError as e:
                log.warning("cannot remove the stale sandbox mount %s: %s", target, e)


def _own_mounts() -> list[tuple[str, str]]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(rest) >= 2 and rest[1].startswith(("rlyard-ws-", "rlyard-view-")):
            out.append((rest[1], fields[4].encode().decode("unicode_escape")))
    return sorted(out, key=lambda m: -len(m[1]))  # inner mounts first


def usage(root: str | Path) -> tuple[int, int]:
    """(bytes of data, entries) under `root`: what a tmpfs copy of it will hold."""
    size = count = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(folder, name))
            count += 1
            if stat.S_ISREG(st.st_mode):
                size += -(-max(st.st_size, st.st_blocks * 512) // 4096) * 4096
    return size, count


def copy_tree(src: str, dst: str) -> None:
    """Folders, regular files and symlinks from src into dst (which exists), owners and modes
    kept but setuid/setgid cleared; fifos, sockets and devices are left out; links not followed."""
    for name in os.listdir(src):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        st = os.lstat(s)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(s), d)
        elif stat.S_ISDIR(st.st_mode):
            os.mkdir(d)
            copy_tree(s, d)
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(s, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                with open(fd, "rb", closefd=False) as fin, open(d, "xb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
            finally:
                os.close(fd)
        else:
            continue
        os.lchown(d, st.st_uid, st.st_gid)
        if not stat.S_ISLNK(st.st_mode):
            os.chmod(d, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))


def _clear(fd: int) -> None:
    for name in os.listdir(fd):
        if stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
            shutil.rmtree(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)


def _unmount_keeping(target: str) -> None:
    """Detach the tmpfs at target and copy what it held into the folder it covered."""
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _detach(target)
        copy_tree(f"/proc/self/fd/{fd}", target)
    finally:
        os.close(fd)


class QuotaFS:
    """A tmpfs mounted on `workspace`, holding its files plus at most `extra_bytes` and
    `extra_inodes` more. Several sandboxes on one workspace share one (counted)."""

    def __init__(self, workspace: Path, extra_bytes: int, extra_inodes: int):
        self.path, self.users = str(workspace), 1
        used, entries = usage(workspace)
        st = os.stat(workspace)
        # size=0 and nr_inodes=0 would mean "no limit" to tmpfs
        self.size, self.inodes = max(used + extra_bytes, 4096), entries + max(extra_inodes, 0) + 1
        self.source = f"{PREFIX}-{os.getpid()}-{next(_counter)}"
        below = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)  # the folder the tmpfs will cover
        try:
            _mount(self.source, self.path, "tmpfs", MS_NOSUID | MS_NODEV,
                   f"size={self.size},nr_inodes={self.inodes},mode={stat.S_IMODE(st.st_mode):o},"
                   f"uid={st.st_uid},gid={st.st_gid},huge=never")
            try:
                copy_tree(f"/proc/self/fd/{below}", self.path)
            except OSError:
                _detach(self.path)
                raise
            _clear(below)
        finally:
            os.close(below)

    @classmethod
    def attach(cls, workspace: Path, extra_bytes: int, extra_inodes: int) -> "QuotaFS":
        with _lock:
            found = _live.get(str(workspace))
            if found is not None:
                found.users += 1
                return found
            made = _live[str(workspace)] = cls(workspace, extra_bytes, extra_inodes)
            return made

    def release(self) -> None:
        """One user fewer; the last one copies the files back out and unmounts."""
        with _lock:
            self.users -= 1
            if self.users > 0 or _live.get(self.path) is not self:
                return
            del _live[self.path]
        if os.path.ismount(self.path):
            _unmount_keeping(self.path)


def remove_workspace(path: str | Path) -> None:
    """Delete a workspace folder, dropping its quota file system with its contents (an episode's end)."""
    path = str(Path(path).resolve()) if os.path.exists(path) else str(path)
    with _lock:
        found = _live.pop(path, None)
    if found is not None and os.path.ismount(path):
        _detach(path)
    shutil.rmtree(path, ignore_errors=True)


class SystemView:
    """One sandbox's private copy of what it sees of the host: /usr (and other folders) through
    read-only overlays of its own, /etc files copied, /dev nodes made afresh, all on a small
    tmpfs under /run/rlyard-views. `source(host_path)` is where bwrap binds from."""

    def __init__(self, folders: list[str], files: list[str]):
        self.name = f"rlyard-view-{os.getpid()}-{next(_counter)}"
        self.root = str(_view_root() / self.name)
        os.mkdir(self.root, 0o755)
        self.map: dict[str, str] = {}
        try:
            _mount(self.name, self.root, "tmpfs", MS_NOSUID, "size=16m,nr_inodes=4096,mode=0755")
            os.mkdir(f"{self.root}/empty")
            for i, folder in enumerate(folders):
                where = f"{self.root}/d{i}"
                os.mkdir(where)
                _mount(self.name, where, "overlay", MS_NOSUID | MS_NODEV | MS_RDONLY,
                       f"lowerdir={_escape(folder)}:{self.root}/empty")
                self.map[folder] = where
            for i, path in enumerate(files):
                where = f"{self.root}/f{i}"
                if os.path.isdir(path) and not os.path.islink(path):
                    os.mkdir(where)
                    copy_tree(path, where)
                else:
                    shutil.copy2(path, where)
                self.map[path] = where
            os.mkdir(f"{self.root}/dev")
            for node in DEV_NODES:
                st = os.stat(f"/dev/{node}")
                os.mknod(f"{self.root}/dev/{node}", 0o666 | stat.S_IFCHR, st.st_rdev)
                os.chmod(f"{self.root}/dev/{node}", 0o666)
        except OSError:
            self.close()
            raise

    def source(self, path: str | Path) -> str:
        return self.map.get(str(path), str(path))

    def dev_args(self) -> list[str]:
        """After bwrap's --dev: its bind mounts of the host's nodes replaced by this view's own."""
        return [a for node in DEV_NODES for a in ("--dev-bind", f"{self.root}/dev/{node}", f"/dev/{node}")]

    def close(self) -> None:
        if os.path.ismount(self.root):
            _detach(self.root)  # detaches the overlays below it too
        try:
            os.rmdir(self.root)
        except OSError:
            pass


def _view_root() -> Path:
    """A root-only folder for the views: /run where it is writable, else the temp folder."""
    error: OSError | None = None
    for root in VIEW_ROOTS:
        try:
            root.mkdir(mode=0o700, exist_ok=True)
            if root.stat().st_uid == os.geteuid() and not root.is_symlink():
                return root
        except OSError as e:
            error = e
    raise error or OSError(f"no folder of our own for sandbox views among {VIEW_ROOTS}")


def _escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace(":", "\\:").replace(",", "\\,")
