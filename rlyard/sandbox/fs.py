"""What the sandbox's file system is made of: the read-only root, extra read-only binds, the
host paths masked inside it (rlyard's own package with its hidden tests, the model cache,
whatever the caller adds), and the passwd/group files that name the sandbox uid."""
from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Callable

from rlyard.cache import cache_dir

MOUNT_POINT = "/workspace"  # where the workspace appears inside bwrap (the command's cwd)
ROOT_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64")  # symlinks into /usr on merged-/usr hosts
ID_FILES = ("/etc/passwd", "/etc/group")
ETC_FILES = (  # the minimum that libc, python and Debian's /usr/bin symlinks need
    *ID_FILES, "/etc/hosts", "/etc/nsswitch.conf", "/etc/ld.so.cache",
    "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives",
)
SANDBOX_USER = "sandbox"
MASK_TMPFS_BYTES = 4096
FORBIDDEN_RO_BINDS = ("/proc", "/dev", MOUNT_POINT)  # inside these a bind would shadow the sandbox


def package_dir() -> Path:
    """The installed rlyard package (`Path(rlyard.__file__).parent`): task data, hidden tests."""
    return Path(__file__).resolve().parent.parent


def _within(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def _same(path: str) -> str:
    return path


def root_fs_args(id_files: bool = True, source: Callable[[str], str] = _same) -> list[str]:
    """`source(host path)`: where to bind each from (a sandbox's private view, `mounts.SystemView`)."""
    # /etc is made first, world-readable: bwrap would create it 0700 for root, which the
    # sandbox uid could not enter (git then fails on /etc/gitconfig, libc on ld.so.cache).
    args = ["--ro-bind", source("/usr"), "/usr", "--perms", "0755", "--dir", "/etc"]
    for path in ROOT_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", source(path), path]
    for path in ETC_FILES:
        if id_files or path not in ID_FILES:
            args += ["--ro-bind-try", source(path), path]
    return args


def view_parts(ro_binds: tuple[tuple[Path, str], ...]) -> tuple[list[str], list[str]]:
    """(folders a private view overlays, /etc entries it copies) for `root_fs_args` and `bwrap_binds`."""
    folders = ["/usr", *(p for p in ROOT_DIRS if os.path.isdir(p) and not os.path.islink(p)),
               *(str(src) for src, _ in ro_binds)]
    files = [p for p in ETC_FILES if p not in ID_FILES and os.path.exists(p)]
    return list(dict.fromkeys(folders)), files


def root_binds() -> list[tuple[Path, str]]:
    """(host source, sandbox destination) of what `root_fs_args` binds."""
    binds = [(Path("/usr").resolve(), "/usr")]
    binds += [(Path(p).resolve(), p) for p in (*ROOT_DIRS, *ETC_FILES) if os.path.exists(p) and not os.path.islink(p)]
    return binds


def check_ro_bind(path: str | Path) -> tuple[Path, str]:
    """A folder to bind read-only at its own path: (resolved source, destination)."""
    given = os.path.abspath(path)
    src = Path(given).resolve()
    if not src.is_dir():
        raise ValueError(f"ro_bind {given} is not a directory")
    if src == Path("/") or given == "/":
        raise ValueError("ro_bind '/' would expose the whole host")
    pkg = package_dir()
    if _within(pkg, src) or _within(src, pkg):
        raise ValueError(f"ro_bind {given} would expose rlyard's package directory {pkg} (hidden tests)")
    for top in FORBIDDEN_RO_BINDS:
        if _within(Path(given), Path(top)):
            raise ValueError(f"ro_bind {given} lies under {top}, which the sandbox provides itself")
    return src, given


def hidden_paths(extra: tuple[str | Path, ...]) -> tuple[Path, ...]:
    """The default masks (package, cache) plus `extra`, resolved, deduplicated."""
    out: list[Path] = []
    for p in (package_dir(), cache_dir(), *extra):
        r = Path(os.path.abspath(p)).resolve()
        if r == Path("/"):
            raise ValueError("hide='/' would hide everything")
        if r not in out:
            out.append(r)
    return tuple(out)


def _mask_args(hide: tuple[Path, ...], binds: list[tuple[Path, str]]) -> list[str]:
    args: list[str] = []
    done: set[str] = set()
    for h in hide:
        if not h.exists():
            continue
        for src, dst in binds:
            if not _within(h, src):
                continue
            target = str(Path(dst) / h.relative_to(src))
            if target in done:
                continue
            done.add(target)
            if h.is_dir():
                args += ["--perms", "0555", "--size", str(MASK_TMPFS_BYTES), "--tmpfs", target]
            else:
                args += ["--ro-bind", "/dev/null", target]
    return args


def _parents(dst: str) -> list[str]:
    """Make the missing parents of a bind destination 0755 (bwrap would make them 0700, which
    the sandbox uid cannot enter); `--dir` leaves a directory that exists as it is."""
    args: list[str] = []
    for parent in reversed(Path(dst).parents[:-1]):  # without "/"
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def bwrap_binds(workspace: Path, ro_binds: tuple[tuple[Path, str], ...], hide: tuple[Path, ...],
                source: Callable[[str], str] = _same) -> list[str]:
    """Workspace, extra read-only binds and masks, in an order where each mask wins over the
    bind that would expose it, and a ro_bind inside a masked folder (a venv in the cache) is
    bound again on top of the mask."""
    outer = [b for b in ro_binds if not any(_within(b[0], h) for h in hide)]
    inner = [b for b in ro_binds if b not in outer]
    args = ["--bind", str(workspace), MOUNT_POINT]
    for src, dst in outer:
        args += [*_parents(dst), "--ro-bind", source(str(src)), dst]
    binds = [*root_binds(), (workspace, MOUNT_POINT), *outer]
    args += _mask_args(hide, binds)
    for src, dst in inner:
        args += [*_parents(dst), "--ro-bind", source(str(src)), dst]
    args += _mask_args(tuple(h for h in hide if any(_within(h, b[0]) and h != b[0] for b in inner)), inner)
    return args


def unshare_mask_script(workspace: Path, ro_binds: tuple[tuple[Path, str], ...], hide: tuple[Path, ...],
                        covered: tuple[str, ...] = ()) -> str:
    """Shell (run as root in the new mount namespace) that masks what it safely can.

    Under unshare the host tree is the sandbox's tree, so a masked folder that contains the
    workspace or a ro_bind is left visible (masking it would hide those too). Paths under
    `covered` (folders that get a fresh tmpfs first, such as /tmp) are hidden already.
    """
    cmds = []
    keep = [workspace, *(src for src, _ in ro_binds)]
    for h in hide:
        if not h.exists() or any(_within(k, h) for k in keep) or any(_within(h, Path(c)) for c in covered):
            continue
        if h.is_dir():
            cmds.append(f"mount -t tmpfs -o size={MASK_TMPFS_BYTES},mode=0555 tmpfs {shlex.quote(str(h))}")
        else:
            cmds.append(f"mount --bind /dev/null {shlex.quote(str(h))}")
    return "; ".join(cmds)


def _entries(path: str) -> list[str]:
    try:
        return [line for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return []


def identity_files(uid: int, gid: int) -> dict[str, bytes]:
    """/etc/passwd and /etc/group: the host's lines plus `sandbox` for uid/gid if unnamed."""
    def has_id(lines: list[str], ident: int) -> bool:
        return any(len(f) > 2 and f[2] == str(ident) for f in (line.split(":") for line in lines))

    passwd = [line for line in _entries("/etc/passwd") if not line.startswith(SANDBOX_USER + ":")]
    group = [line for line in _entries("/etc/group") if not line.startswith(SANDBOX_USER + ":")]
    if not has_id(passwd, uid):
        passwd.append(f"{SANDBOX_USER}:x:{uid}:{gid}::{MOUNT_POINT}:/bin/sh")
    if not has_id(group, gid):
        group.append(f"{SANDBOX_USER}:x:{gid}:")
    return {"/etc/passwd": ("\n".join(passwd) + "\n").encode(), "/etc/group": ("\n".join(group) + "\n").encode()}
