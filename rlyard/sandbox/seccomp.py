"""The seccomp filter every sandboxed process runs under (bwrap `--seccomp FD`).

A classic-BPF program, packed by hand with `struct` (no libseccomp: nothing to install, and
the rule set is small). bwrap loads it after its own setup (namespaces, mounts), so the
filter applies to the command and everything it starts, not to bwrap itself.

The program, in order:

1. `seccomp_data.arch` must be the native architecture (x86_64 or aarch64), else the process
   is killed: no i386 (`int 0x80`) or 32-bit ARM syscalls, whose numbers differ.
2. On x86_64, x32 syscall numbers (bit 30 set) fail with EPERM.
3. The calls in `DENIED` fail with EPERM: the kernel keyring (a channel between runs that
   outlives the processes), ptrace and cross-process memory access, mounts and namespaces,
   io_uring, handle-based opens, modules, kexec, reboot, swap, accounting, perf, bpf,
   userfaultfd.
   Also the calls that serve here only as probes of, or switches on, state every sandbox shares
   (issue 36: they carried bits between sandboxes): inotify and fanotify (watches on system
   files see other sandboxes' reads), `fadvise64` (evicts shared page cache), `readahead`,
   `mincore` and `cachestat` (read residency).
4. `preadv2` with `RWF_NOWAIT` (fails when the data is not cached: a residency probe),
   `madvise` with `MADV_COLD` or `MADV_PAGEOUT` (evict shared file pages) and `fcntl` with
   `F_NOTIFY` (dnotify: inotify's older form, a watch on a folder) fail with EPERM.
5. `clone` with any `CLONE_NEW*` flag fails with EPERM (the same as `unshare`); `clone3`
   fails with ENOSYS, because its flags sit in memory a filter cannot read: libc then falls
   back to `clone`, which is checked.
6. Everything else is allowed.
"""
from __future__ import annotations

import errno
import os
import platform
import struct

# linux/filter.h and linux/seccomp.h
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x05 | 0x40 | 0x00  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; arg0's low word (little-endian)
_OFF_ARG1, _OFF_ARG2, _OFF_ARG5 = 16 + 8, 16 + 8 * 2, 16 + 8 * 5

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
CLONE_NEW_FLAGS = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET

# name: (x86_64 number, aarch64 number)
DENIED: dict[str, tuple[int, int]] = {
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "perf_event_open": (298, 241), "bpf": (321, 280), "userfaultfd": (323, 282),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "setns": (308, 268),
    "unshare": (272, 97), "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "reboot": (169, 142),
    "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89), "syslog": (103, 116),
    "quotactl": (179, 60), "fanotify_init": (300, 262), "lookup_dcookie": (212, 18),
    # channels through the shared system tree and page cache (-1: no such call on that architecture)
    "inotify_init": (253, -1), "inotify_init1": (294, 26), "inotify_add_watch": (254, 27),
    "fanotify_mark": (301, 263), "fadvise64": (221, 223), "readahead": (187, 213),
    "mincore": (27, 232), "cachestat": (451, 451),
}
PREADV2 = (327, 286)
RWF_NOWAIT = 0x8
MADVISE = (28, 233)
MADV_EVICT = (20, 21)  # MADV_COLD, MADV_PAGEOUT
FCNTL = (72, 25)
F_NOTIFY = 1026
CLONE = (56, 220)
CLONE3 = (435, 435)


def machine() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def supported(arch: str | None = None) -> bool:
    return (arch or machine()) in AUDIT_ARCH


def program(arch: str | None = None) -> bytes:
    """The filter as an array of `struct sock_filter` (what bwrap's --seccomp reads)."""
    arch = arch or machine()
    if arch not in AUDIT_ARCH:
        raise ValueError(f"no seccomp filter for architecture {arch!r}")
    col = 0 if arch == "x86_64" else 1
    ins: list[tuple[int, int | str, int | str, int]] = [  # (code, jt, jf, k); labels resolved below
        (_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_JEQ_K, 1, 0, AUDIT_ARCH[arch]),
        (_RET_K, 0, 0, RET_KILL_PROCESS),
        (_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if arch == "x86_64":
        ins.append((_JGE_K, "eperm", 0, X32_SYSCALL_BIT))
    for nrs in DENIED.values():
        if nrs[col] >= 0:
            ins.append((_JEQ_K, "eperm", 0, nrs[col]))
    ins += [
        (_JEQ_K, "enosys", 0, CLONE3[col]),
        (_JEQ_K, "preadv2", 0, PREADV2[col]),
        (_JEQ_K, "madvise", 0, MADVISE[col]),
        (_JEQ_K, "fcntl", 0, FCNTL[col]),
        (_JEQ_K, 0, "allow", CLONE[col]),
        (_LD_W_ABS, 0, 0, _OFF_ARG0),
        (_JSET_K, "eperm", "allow", CLONE_NEW_FLAGS),
    ]
    labels = {"preadv2": len(ins)}
    ins += [(_LD_W_ABS, 0, 0, _OFF_ARG5), (_JSET_K, "eperm", "allow", RWF_NOWAIT)]
    labels["madvise"] = len(ins)
    ins += [(_LD_W_ABS, 0, 0, _OFF_ARG2), (_JEQ_K, "eperm", 0, MADV_EVICT[0]), (_JEQ_K, "eperm", "allow", MADV_EVICT[1])]
    labels["fcntl"] = len(ins)
    ins += [(_LD_W_ABS, 0, 0, _OFF_ARG1), (_JEQ_K, "eperm", "allow", F_NOTIFY)]
    labels.update({"allow": len(ins), "eperm": len(ins) + 1, "enosys": len(ins) + 2})
    ins += [(_RET_K, 0, 0, RET_ALLOW), (_RET_K, 0, 0, RET_ERRNO | errno.EPERM),
            (_RET_K, 0, 0, RET_ERRNO | errno.ENOSYS)]
    out = bytearray()
    for i, (code, jt, jf, k) in enumerate(ins):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        assert 0 <= jt < 256 and 0 <= jf < 256
        out += struct.pack("=HBBI", code, jt, jf, k)
    return bytes(out)


def program_fd(arch: str | None = None) -> int:
    """A memfd holding `program()`, positioned at its start (bwrap reads it to EOF)."""
    return data_fd("rlyard-seccomp", program(arch))


def data_fd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
