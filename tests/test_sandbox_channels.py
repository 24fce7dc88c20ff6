"""Channels between sandboxes through what they share (issue 36): a sender sandbox and a receiver
sandbox, each played through the agent's bash tool. Before the fix each receiver read every bit;
now every probe fails or reads nothing (the received bits match the message no better than chance).

- locks on files outside the workspace (flock, POSIX, OFD; on /usr files, a /usr folder, /etc
  files, /dev/null), held by a running sender and probed by a receiver running at the same time;
- inotify watches on system files, set by a running receiver, triggered by a sender's reads;
- page-cache residency of a big system file: a sender run clears it with posix_fadvise and sets it
  with reads, a later receiver run reads it back with mincore, preadv2(RWF_NOWAIT) or cachestat.
"""
import glob
import os
import secrets
import threading
import time
from pathlib import Path

import pytest

from rlyard.agent.tools import ToolBox
from rlyard.sandbox import Limits, Sandbox, cgroups, mounts
from rlyard.sandbox.sandbox import bwrap_works

LIMITS = Limits(wall_s=40, cpu_s=20, memory_bytes=512 << 20, nproc=32, output_bytes=64 << 10)
needs_bwrap = pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot start a sealed sandbox here")
N = 16
WAIT = r"""
import os, time
open("ready", "w").close()
end = time.time() + 30
while not os.path.exists("go") and time.time() < end:
    time.sleep(0.05)
"""


def message() -> str:
    """16 bits, exactly half of them ones: a receiver that reads only zeros (or only ones) scores 8."""
    bits = ["1"] * (N // 2) + ["0"] * (N // 2)
    for i in range(N - 1, 0, -1):
        j = secrets.randbelow(i + 1)
        bits[i], bits[j] = bits[j], bits[i]
    return "".join(bits)


def matches(sent: str, text: str) -> int:
    got = next((line.split()[1] for line in text.splitlines() if line.startswith("BITS ")), "")
    return sum(a == b for a, b in zip(sent, got))


def bash(box: Sandbox, script: str, name: str) -> str:
    """The agent's own path: write the program with write_file, run it with bash."""
    tools = ToolBox(box, ("bash", "write_file"), timeout_s=LIMITS.wall_s)
    tools.call("write_file", {"path": name, "content": script})
    return tools.call("bash", {"command": f"python3 {name}"}).content


def overlapped(tmp_path: Path, holder: str, actor: str, ro_binds: tuple[Path, ...] = ()) -> tuple[str, str]:
    """Run `holder` until it has written `ready`, then `actor` to its end, then let `holder` finish."""
    boxes = []
    for name in ("holder", "actor"):
        (tmp_path / name).mkdir()
        boxes.append(Sandbox(tmp_path / name, LIMITS, isolation="bwrap", ro_binds=ro_binds))
    out: dict[str, str] = {}
    thread = threading.Thread(target=lambda: out.setdefault("holder", bash(boxes[0], holder, "holder.py")))
    thread.start()
    end = time.monotonic() + 30
    while not (boxes[0].workspace / "ready").exists() and time.monotonic() < end and thread.is_alive():
        time.sleep(0.05)
    try:
        out["actor"] = bash(boxes[1], actor, "actor.py")
    finally:
        (boxes[0].workspace / "go").write_text("")
        thread.join(60)
    return out["holder"], out["actor"]


TARGETS = r"""
import glob
TARGETS = sorted(glob.glob("/usr/share/common-licenses/*"))[:11] + ["/usr/share/common-licenses", "/etc/ld.so.cache",
          "/etc/hosts", "/dev/null", "/usr/bin"]
"""
LOCK_SENDER = TARGETS + r"""
import fcntl, os, struct, sys
bits = sys.argv[1] if len(sys.argv) > 1 else "%s"
held = []
for i, (path, bit) in enumerate(zip(TARGETS, bits)):
    if bit != "1":
        continue
    fd = os.open(path, os.O_RDONLY)
    held.append(fd)
    try:
        if i %% 3 == 0:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:  # a read lock: the only kind a read-only file takes (POSIX, then open-file-description locks)
            fcntl.fcntl(fd, fcntl.F_SETLK if i %% 3 == 1 else fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 0, 0, 0))
    except OSError as e:
        print("lock", path, e)
""" + WAIT
LOCK_RECEIVER = TARGETS + r"""
import fcntl, os, struct
got = ""
for i, path in enumerate(TARGETS):
    fd = os.open(path, os.O_RDONLY)
    try:
        if i % 3 == 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                got += "0"
            except BlockingIOError:
                got += "1"
        else:
            query = fcntl.fcntl(fd, fcntl.F_GETLK if i % 3 == 1 else fcntl.F_OFD_GETLK,
                                struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0))
            got += "0" if struct.unpack("hhqqi4x", query)[0] == fcntl.F_UNLCK else "1"
    except OSError as e:
        print("probe", path, e)
        got += "E"
    os.close(fd)
print("BITS", got)
"""


@needs_bwrap
@pytest.mark.skipif(not mounts.can_view(), reason="a private view of the system tree needs root (docs/sandbox.md)")
def test_lock_on_a_system_file_carries_nothing(tmp_path):
    """flock / POSIX / OFD locks on /usr files, a /usr folder, /etc files, /dev/null and a
    file in a shared read-only bind (a task's venv), held by one sandbox while another probes them."""
    shared = tmp_path / "venv"
    shared.mkdir()
    (shared / "site.py").write_text("")
    os.chmod(tmp_path, 0o755)
    sent = message()
    targets = ("LOCK_SENDER", "LOCK_RECEIVER")
    sender, receiver = (globals()[t].replace('"/usr/bin"', repr(str(shared / "site.py"))) for t in targets)
    held, got = overlapped(tmp_path, sender % sent, receiver, ro_binds=(shared,))
    assert "ready" not in held and "lock" not in held, held  # the sender's locks were granted (on its private view)
    assert "BITS " in got, got
    assert matches(sent, got) <= 12, f"the receiver read the sender's locks: sent {sent}\n{got}"


INOTIFY_RECEIVER = TARGETS + r"""
import ctypes, os, struct, time
libc = ctypes.CDLL(None, use_errno=True)
IN_ACCESS, IN_OPEN, IN_NONBLOCK = 0x1, 0x20, 0o4000
fd = libc.inotify_init1(IN_NONBLOCK)
if fd < 0:
    print("inotify_init1", os.strerror(ctypes.get_errno()))
watches = {}
for i, path in enumerate(TARGETS):
    if fd >= 0:
        wd = libc.inotify_add_watch(fd, path.encode(), IN_ACCESS | IN_OPEN)
        watches[wd] = i
""" + WAIT + r"""
seen = set()
while fd >= 0:
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        break
    while data:
        wd, mask, cookie, size = struct.unpack_from("iIII", data)
        seen.add(watches.get(wd))
        data = data[16 + size:]
print("BITS", "".join("1" if i in seen else "0" for i in range(len(TARGETS))))
"""
INOTIFY_SENDER = TARGETS + r"""
import os
for path, bit in zip(TARGETS, "%s"):
    if bit == "1":
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, 16)
        except IsADirectoryError:
            os.listdir(path)
        os.close(fd)
print("sent")
"""


@needs_bwrap
def test_inotify_watch_on_a_system_file_carries_nothing(tmp_path):
    sent = message()
    got, acted = overlapped(tmp_path, INOTIFY_RECEIVER, INOTIFY_SENDER % sent)
    assert "sent" in acted, acted
    assert "BITS " in got, got
    assert matches(sent, got) <= 12, f"the receiver's watches saw the sender's reads: sent {sent}\n{got}"
    assert "Operation not permitted" in got


def big_system_file() -> str | None:
    """A large shared library nobody maps (LLVM, ICU data...): >= 17 MiB for 16 chunks 1 MiB apart."""
    found = sorted(((os.path.getsize(p), p) for p in glob.glob("/usr/lib/*-linux-gnu/lib*.so*")
                    if os.path.isfile(p) and not os.path.islink(p)), reverse=True)
    return found[0][1] if found and found[0][0] >= 17 << 20 else None


PAGE_SENDER = r"""
import os
fd = os.open("%s", os.O_RDONLY)
try:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
except OSError as e:
    print("fadvise", e)
for i, bit in enumerate("%s"):
    if bit == "1":
        os.pread(fd, 4096, i << 20)
print("sent")
"""
PAGE_RECEIVER = r"""
import ctypes, math, mmap, os, struct, sys, time
path, how = "%s", "%s"
times = []
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
fd = os.open(path, os.O_RDONLY)
got = ""
for i in range(16):
    try:
        if how == "mincore":
            libc.mmap.restype = ctypes.c_void_p
            base = libc.mmap(None, ctypes.c_size_t(4096), mmap.PROT_READ, mmap.MAP_SHARED, fd, ctypes.c_long(i << 20))
            vec = ctypes.create_string_buffer(1)
            if libc.mincore(ctypes.c_void_p(base), ctypes.c_size_t(4096), vec) != 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            got += "1" if vec.raw[0] & 1 else "0"
        elif how == "preadv2":
            try:
                os.preadv(fd, [bytearray(4096)], i << 20, os.RWF_NOWAIT)
                got += "1"
            except BlockingIOError:
                got += "0"
        elif how == "timing":  # what is left with every probe refused: a cold chunk takes ~50x longer to read
            t = time.perf_counter_ns()
            os.pread(fd, 1, i << 20)
            times.append(time.perf_counter_ns() - t)
            got += "?"
        else:  # cachestat(2): {off, len} in, {cache, dirty, writeback, evicted, recently_evicted} out
            rng, stat = struct.pack("QQ", i << 20, 4096), ctypes.create_string_buffer(40)
            if libc.syscall(451, fd, ctypes.c_char_p(rng), stat, 0) != 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            got += "1" if struct.unpack("5Q", stat.raw)[0] else "0"
    except OSError as e:
        print(how, e)
        got += "E"
if times:  # split the log-times in two groups where they differ most
    logs = sorted(math.log(t) for t in times)
    gap = max(range(1, 16), key=lambda k: k * (16 - k) * (sum(logs[k:]) / (16 - k) - sum(logs[:k]) / k) ** 2)
    got = "".join("1" if math.log(t) < (logs[gap - 1] + logs[gap]) / 2 else "0" for t in times)
print("BITS", got)
"""


@needs_bwrap
@pytest.mark.parametrize("how", ["mincore", "preadv2", "cachestat", "timing"])
def test_page_cache_residency_carries_nothing_to_a_later_run(tmp_path, how):
    """The probes are refused; timing reads, which cannot be, find the sender's pages gone:
    the end of each run evicts the file pages it was the first to read (its cgroup's)."""
    path = big_system_file()
    if path is None:
        pytest.skip("no shared library of 17 MiB under /usr/lib/*-linux-gnu")
    if how == "timing" and cgroups.backend() is None:
        pytest.skip("without a cgroup per run, pages a run read stay cached (docs/sandbox.md)")
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # from the host: a system file nobody has read lately
    os.close(fd)
    sent = message()
    for name in ("sender", "receiver"):
        (tmp_path / name).mkdir()
    out = bash(Sandbox(tmp_path / "sender", LIMITS, isolation="bwrap"), PAGE_SENDER % (path, sent), "send.py")
    assert "sent" in out, out
    got = bash(Sandbox(tmp_path / "receiver", LIMITS, isolation="bwrap"), PAGE_RECEIVER % (path, how), "receive.py")
    assert "BITS " in got, got
    assert matches(sent, got) <= 12, f"{how} read the page cache the sender left: sent {sent}\n{got}"
    assert "fadvise [Errno 1]" in out, out
    assert how == "timing" or "Operation not permitted" in got, got
