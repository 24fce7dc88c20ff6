"""Sandbox isolation holes from the security review, each played through `Sandbox.run` (what the
agent's bash tool calls): package data readable under /usr, a kernel-keyring channel between
runs of the shared uid, one sandbox starving another's process budget, SysV IPC between runs.
Also the uid pool, passwd entry, masks, ro_binds, per-run limits and `require_sealed`.
"""
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import rlyard.sandbox.sandbox as sbx
from rlyard.sandbox import Limits, Sandbox, SandboxError, SandboxUnavailable, UidPool, require_sealed
from rlyard.sandbox.sandbox import bwrap_available, unshare_available

LIMITS = Limits(wall_s=10, cpu_s=5, memory_bytes=512 << 20, nproc=48, fsize_bytes=1 << 20,
                nofile=64, output_bytes=64 << 10, output_kill_bytes=8 << 20, tmp_bytes=8 << 20)
AS_ROOT = os.geteuid() == 0
HAVE_BWRAP = bwrap_available()
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap cannot start a sandbox here")
needs_root = pytest.mark.skipif(not AS_ROOT, reason="per-run uids are used only when rlyard runs as root")
ARCH = platform.machine()
NR = {"x86_64": {"add_key": 248, "keyctl": 250, "ptrace": 101, "process_vm_readv": 310, "clone": 56, "clone3": 435,
                 "unshare": 272, "mount": 165, "setns": 308, "io_uring_setup": 425, "bpf": 321, "kcmp": 312,
                 "perf_event_open": 298, "userfaultfd": 323, "open_by_handle_at": 304, "init_module": 175,
                 "finit_module": 313, "delete_module": 176, "kexec_load": 246, "reboot": 169, "swapon": 167,
                 "swapoff": 168, "acct": 163, "pivot_root": 155, "umount2": 166, "request_key": 249,
                 "process_vm_writev": 311, "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254,
                 "fanotify_mark": 301, "fadvise64": 221, "readahead": 187, "mincore": 27, "cachestat": 451,
                 "preadv2": 327, "madvise": 28, "fcntl": 72},
      "aarch64": {"add_key": 217, "keyctl": 219, "ptrace": 117, "process_vm_readv": 270, "clone": 220, "clone3": 435,
                  "unshare": 97, "mount": 40, "setns": 268, "io_uring_setup": 425, "bpf": 280, "kcmp": 272,
                  "perf_event_open": 241, "userfaultfd": 282, "open_by_handle_at": 265, "init_module": 105,
                  "finit_module": 273, "delete_module": 106, "kexec_load": 104, "reboot": 142, "swapon": 224,
                  "swapoff": 225, "acct": 89, "pivot_root": 41, "umount2": 39, "request_key": 218,
                  "process_vm_writev": 271, "inotify_init1": 26, "inotify_add_watch": 27, "fanotify_mark": 263,
                  "fadvise64": 223, "readahead": 213, "mincore": 232, "cachestat": 451, "preadv2": 286,
                  "madvise": 233, "fcntl": 25}}.get(ARCH)
needs_arch = pytest.mark.skipif(NR is None, reason=f"syscall numbers not known for {ARCH}")


@pytest.fixture
def ws(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


def run_py(box: Sandbox, code: str, name: str = "probe.py", **kw):
    """Write `code` into the workspace and run it with the sandbox's python3 (as the agent would)."""
    (box.workspace / name).write_text(code)
    return box.run(f"python3 {name}", **kw)


# ---------------------------------------------------------------- 1. package data, masks, ro_binds

CHECK_INSTALLED = r"""
import json, sys
from pathlib import Path
import rlyard
from rlyard.sandbox import Sandbox, Limits
pkg = Path(rlyard.__file__).parent
assert str(pkg).startswith(sys.argv[1]), pkg
hidden = sorted(pkg.glob("envs/code/builtin/*/tasks/*/tests/*.py"))[0]
repo_file = sorted(p for p in pkg.glob("envs/code/builtin/*/repo/**/*.py") if p.stat().st_size > 40)[0]
box = Sandbox(Path(sys.argv[2]), Limits(wall_s=20), isolation="bwrap")
r = box.run(f"cat {hidden}; cat {repo_file}; ls {pkg}/envs/code; /usr/bin/python3 -c 'print(6*7)'")
print(json.dumps({"hidden": str(hidden), "repo_file": str(repo_file), "stdout": r.stdout.decode(errors="replace"),
                  "stderr": r.stderr.decode(errors="replace"), "code": r.exit_code}))
"""


@needs_bwrap
@pytest.mark.skipif(not AS_ROOT, reason="installing into /usr/local/lib needs root")
def test_installed_package_task_data_is_not_readable(ws, tmp_path):
    target = Path(f"/usr/local/lib/rlyard-itest-{secrets.token_hex(4)}")
    repo = Path(__file__).resolve().parent.parent
    try:  # a real, non-editable install under /usr, which bwrap binds read-only
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-compile", "--target", str(target), str(repo)], check=True, capture_output=True,
                       timeout=300, cwd=tmp_path)
        (tmp_path / "check.py").write_text(CHECK_INSTALLED)
        env = {**os.environ, "PYTHONPATH": str(target)}
        done = subprocess.run([sys.executable, str(tmp_path / "check.py"), str(target), str(ws)], env=env,
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout.splitlines()[-1])
        hidden, repo_file = Path(out["hidden"]), Path(out["repo_file"])
        assert hidden.is_file() and repo_file.is_file()  # they exist on the host, world-readable
        assert hidden.stat().st_mode & 0o004 and repo_file.stat().st_mode & 0o004
        seen = out["stdout"] + out["stderr"]
        for secret in (hidden, repo_file):
            assert secret.read_text().strip()[:200] not in seen, f"{secret} readable in the sandbox"
        assert "builtin" not in out["stdout"]
        assert out["stdout"].strip().endswith("42")  # /usr/bin/python3 still runs
    finally:
        shutil.rmtree(target, ignore_errors=True)


@needs_bwrap
def test_hide_masks_extra_paths_under_bound_folders(ws, tmp_path):
    shared = Path(f"/usr/local/share/rlyard-hide-{secrets.token_hex(4)}")
    token = secrets.token_hex(12)
    try:
        (shared / "run").mkdir(parents=True)
        (shared / "run" / "secret.txt").write_text(token)
        (shared / "note.txt").write_text(token)
        os.chmod(shared / "run" / "secret.txt", 0o644)
        os.chmod(shared / "note.txt", 0o644)
        cmd = f"cat {shared}/run/secret.txt {shared}/note.txt; ls {shared}"
        open_box = Sandbox(ws, LIMITS, isolation="bwrap")
        assert token in open_box.run(cmd).text  # visible without `hide` (it lies under /usr)
        hidden_box = Sandbox(ws, LIMITS, isolation="bwrap", hide=(shared / "run", shared / "note.txt"))
        r = hidden_box.run(cmd)
        assert token not in r.text and r.stderr.count(b"cat: ") == 2, r
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@needs_bwrap
def test_ro_binds_are_read_only_and_cannot_expose_the_package(ws, tmp_path, monkeypatch):
    share = tmp_path / "share"
    venv = share / "cache" / "code-venvs" / "repo-1"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "tool").write_text("venv-file")
    (share / "cache" / "models.txt").write_text("cached-secret")
    (share / "plain.txt").write_text("plain-file")
    for p in (tmp_path, share, share / "cache", venv.parent, venv, venv / "bin"):
        p.chmod(0o755)
    for p in (venv / "bin" / "tool", share / "cache" / "models.txt", share / "plain.txt"):
        p.chmod(0o644)
    monkeypatch.setenv("RLYARD_CACHE", str(share / "cache"))  # the rlyard cache, masked by default
    box = Sandbox(ws, LIMITS, isolation="bwrap", ro_binds=(share, venv))
    r = box.run(f"cat {share}/plain.txt {venv}/bin/tool; cat {share}/cache/models.txt; echo x > {share}/w")
    assert "plain-file" in r.text and "venv-file" in r.text  # bound, and the venv inside the mask too
    assert "cached-secret" not in r.text  # the cache itself is masked
    assert "Read-only file system" in r.text and not (share / "w").exists()
    pkg = Path(sbx.__file__).resolve().parent.parent
    for bad in ("/", pkg, pkg.parent, pkg / "envs"):
        with pytest.raises(SandboxError):
            Sandbox(ws, LIMITS, isolation="bwrap", ro_binds=(bad,))


def test_sealed_and_require_sealed(ws, monkeypatch):
    if HAVE_BWRAP:
        assert Sandbox(ws, LIMITS, isolation="bwrap").sealed
        assert require_sealed(False, "the code family") is True
    if unshare_available():
        assert not Sandbox(ws, LIMITS, isolation="unshare").sealed
    monkeypatch.setattr(sbx, "bwrap_works", lambda: False)
    with pytest.raises(SandboxUnavailable, match="bubblewrap is required.*allow_weak_isolation=true"):
        require_sealed(False, "the code family")
    assert require_sealed(True, "the code family") is False


# ---------------------------------------------------------------- 2. channels between runs

KEY_PLANT = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
secret = b"{token}"
r = libc.syscall({add_key}, b"user", b"{desc}", secret, len(secret), ctypes.c_long(-4))  # @u
print("add_key", r, ctypes.get_errno())
"""
KEY_READ = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
k = libc.syscall({keyctl}, 10, ctypes.c_long(-4), b"user", b"{desc}", 0)  # KEYCTL_SEARCH in @u
print("search", k, ctypes.get_errno())
if k > 0:
    buf = ctypes.create_string_buffer(256)
    n = libc.syscall({keyctl}, 11, ctypes.c_long(k), buf, 256)  # KEYCTL_READ
    print("read", buf.raw[:max(n, 0)].decode())
"""


@needs_bwrap
@needs_arch
def test_kernel_keyring_is_no_channel_between_runs(ws, tmp_path):
    token, desc = secrets.token_hex(12), "k" + secrets.token_hex(4)
    first = Sandbox(ws, LIMITS, isolation="bwrap")
    r1 = run_py(first, KEY_PLANT.format(token=token, desc=desc, add_key=NR["add_key"]))
    other = tmp_path / "ws2"
    other.mkdir()
    r2 = run_py(Sandbox(other, LIMITS, isolation="bwrap"), KEY_READ.format(desc=desc, keyctl=NR["keyctl"]))
    r3 = first.run(f"keyctl search @u user {desc} 2>&1; keyctl show @u 2>&1 | head -3" if shutil.which("keyctl")
                   else "true")
    assert token not in r2.text + r3.text
    assert r1.stdout.split() == [b"add_key", b"-1", b"1"], r1  # EPERM from the seccomp filter
    assert r2.stdout.split()[:3] == [b"search", b"-1", b"1"], r2


SYSCALLS = """
import ctypes, os, mmap
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {{}}
def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(*[ctypes.c_long(a) for a in args])
    if r == 0 and name.startswith("clone"):
        os._exit(0)  # a child that got through
    if r > 0 and name.startswith("clone"):
        os.waitpid(r, 0)
    out[name] = (r, ctypes.get_errno())
pid = os.getpid()
nr = {nr}
for name, n in nr.items():
    if name == "clone":
        call("clone_newuser", n, 0x10000000 | 17, 0, 0, 0, 0)
        call("clone_newns", n, 0x00020000 | 17, 0, 0, 0, 0)
    elif name in ("kcmp",):
        call(name, n, pid, pid, 0, 0, 0)
    elif name == "keyctl":
        call(name, n, 0, -4, 0)  # KEYCTL_GET_KEYRING_ID @u
    elif name == "process_vm_readv":
        call(name, n, pid, 0, 0, 0, 0, 0)
    elif name == "ptrace":
        call(name, n, 0, 0, 0, 0)  # PTRACE_TRACEME
    elif name == "unshare":
        call("unshare_newuser", n, 0x10000000)
        call("unshare_none", n, 0)
    elif name == "preadv2":
        call("preadv2_nowait", n, 0, 0, 0, 0, 0, 8)  # RWF_NOWAIT: a page-cache probe
    elif name == "madvise":
        call("madvise_pageout", n, 0, 4096, 21)
        call("madvise_cold", n, 0, 4096, 20)
    elif name == "fcntl":
        call("fcntl_notify", n, os.open("/usr", os.O_RDONLY), 1026, 0x1)  # F_NOTIFY DN_ACCESS: dnotify
    else:
        call(name, n, 0, 0, 0, 0, 0, 0)
if {x86}:
    call("x32_getpid", 0x40000000 | 39)
print(repr(out))
"""
I386 = """
import ctypes, mmap
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))  # mov eax, 20 (i386 getpid); int 0x80; ret
fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
print("i386-getpid", fn(), flush=True)
"""


@needs_bwrap
@needs_arch
def test_seccomp_denies_dangerous_syscalls(ws):
    box = Sandbox(ws, LIMITS, isolation="bwrap")
    r = run_py(box, SYSCALLS.format(nr=NR, x86=ARCH == "x86_64"))
    assert r.exit_code == 0, r
    got = eval(r.stdout.decode())  # noqa: S307 - our own repr of a dict of ints
    expected = {"clone3": (-1, 38)}  # ENOSYS: libc falls back to clone, whose flags are checked
    for name, (ret, err) in got.items():
        assert (ret, err) == expected.get(name, (-1, 1)), (name, ret, err)  # EPERM
    assert {"add_key", "ptrace", "process_vm_readv", "unshare_newuser", "clone_newuser", "io_uring_setup",
            "inotify_init1", "fadvise64", "mincore", "preadv2_nowait", "madvise_pageout", "fcntl_notify"} <= set(got)
    # their ordinary uses still work: preadv2 without RWF_NOWAIT, madvise(MADV_DONTNEED) (malloc's)
    r = box.run("python3 -c \"import mmap, os; fd = os.open('/etc/hosts', os.O_RDONLY); b = bytearray(4); "
                "print(os.preadv(fd, [b], 0)); m = mmap.mmap(-1, 1 << 20); m.madvise(mmap.MADV_DONTNEED); "
                "import fcntl; print(fcntl.fcntl(fd, fcntl.F_GETFD) >= 0 and 'ok')\"")
    assert r.stdout == b"4\nok\n", r
    # ordinary process creation still works (fork, threads, posix_spawn, pipes)
    r = box.run("python3 -c \"import subprocess, threading; t = threading.Thread(target=print, args=('t',));"
                " t.start(); t.join(); print(subprocess.run(['true']).returncode)\"; sh -c 'echo sub'")
    assert r.stdout == b"t\n0\nsub\n", r
    assert b"Operation not permitted" in box.run("unshare -U true; unshare -m true").stderr
    if ARCH == "x86_64":  # the i386 syscall table: the process is killed (or int 0x80 is not there at all)
        r = run_py(box, I386)
        assert b"i386-getpid" not in r.stdout and r.exit_code in (128 + 31, 128 + 11, -31, -11), r


@needs_bwrap
def test_sysv_ipc_does_not_cross_runs(ws, tmp_path):
    if not shutil.which("ipcmk"):
        pytest.skip("no ipcmk")
    r1 = Sandbox(ws, LIMITS, isolation="bwrap").run("ipcmk -M 1024 && ipcmk -Q && ipcs -m -q")
    assert r1.exit_code == 0 and r1.stdout.count(b"\n0x") >= 2, r1
    other = tmp_path / "ws2"
    other.mkdir()
    for box in (Sandbox(ws, LIMITS, isolation="bwrap"), Sandbox(other, LIMITS, isolation="bwrap")):
        r2 = box.run("ipcs -m -q")
        assert r2.exit_code == 0 and b"\n0x" not in r2.stdout, r2


@needs_bwrap
@needs_root
def test_each_run_has_its_own_named_uid(ws, tmp_path):
    other = tmp_path / "ws2"
    other.mkdir()
    boxes = [Sandbox(ws, LIMITS, isolation="bwrap"), Sandbox(other, LIMITS, isolation="bwrap")]
    results = [None, None]

    def go(i):
        results[i] = boxes[i].run("id -u; whoami; python3 -c 'import os, pwd; print(pwd.getpwuid(os.getuid()).pw_dir)';"
                                  " sleep 1.5")
    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    uids = [int(r.stdout.split()[0]) for r in results]
    assert uids[0] != uids[1] and 65534 not in uids and 0 not in uids
    for r in results:
        assert r.stdout.split()[1:] == [b"sandbox", b"/workspace"], r
    assert os.stat(ws).st_uid == uids[0]  # the workspace was given to the run's uid
    assert Sandbox(ws, LIMITS, isolation="bwrap", uid=65534).run("id -u").stdout == b"65534\n"  # explicit uid kept


# ---------------------------------------------------------------- 3. process budget per sandbox

HOG = """
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
open("full", "w").write(str(n))
time.sleep(5)
"""


@needs_bwrap
@needs_root
def test_one_sandbox_cannot_use_up_anothers_process_budget(ws, tmp_path):
    small = Limits(wall_s=15, cpu_s=5, memory_bytes=512 << 20, nproc=16, tmp_bytes=8 << 20)
    hog = Sandbox(ws, small, isolation="bwrap")
    other = tmp_path / "ws2"
    other.mkdir()
    honest = Sandbox(other, small, isolation="bwrap")
    (ws / "hog.py").write_text(HOG)
    done = {}
    thread = threading.Thread(target=lambda: done.setdefault("hog", hog.run("python3 hog.py")))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not (ws / "full").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (ws / "full").exists(), "the hog never filled its budget"
        r = honest.run("python3 -c \"import subprocess; print(subprocess.run(['true']).returncode)\"")
        assert r.exit_code == 0 and r.stdout == b"0\n", r
        assert thread.is_alive()  # the hog was still holding all its processes meanwhile
    finally:
        thread.join()
    assert done["hog"].exit_code == 0


# ---------------------------------------------------------------- uid pool, per-run limits


def test_uid_pool_hands_out_distinct_uids_across_threads_and_processes(tmp_path):
    lock_dir = tmp_path / "locks"
    pool = UidPool(base=2_000_000, size=8, lock_dir=lock_dir)
    held = []
    barrier = threading.Barrier(6)

    def grab():
        barrier.wait()
        held.append(pool.acquire())
    threads = [threading.Thread(target=grab) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({lease.uid for lease in held}) == 6 and all(2_000_000 <= lease.uid < 2_000_008 for lease in held)
    assert oct(lock_dir.stat().st_mode & 0o777) == "0o700"
    code = ("import sys, time; from rlyard.sandbox import UidPool\n"
            f"pool = UidPool(base=2_000_000, size=8, lock_dir={str(lock_dir)!r})\n"
            "a, b = pool.acquire(), pool.acquire(); print(a.uid, b.uid, flush=True); time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child_uids = {int(u) for u in child.stdout.readline().split()}
        assert len(child_uids) == 2 and not child_uids & {lease.uid for lease in held}
        with pytest.raises(RuntimeError, match="in use"):
            pool.acquire()
        held.pop().release()
        again = pool.acquire()  # the released slot is free again
        assert again.uid not in child_uids
        again.release()
    finally:
        child.kill()
        child.wait()
    assert pool.acquire().uid in child_uids | {u for u in range(2_000_000, 2_000_008)}  # the dead child's locks are gone
    bad = tmp_path / "open"
    bad.mkdir(mode=0o777)
    bad.chmod(0o777)
    with pytest.raises(PermissionError):
        UidPool(base=2_000_000, size=2, lock_dir=bad).acquire()


@needs_bwrap
def test_run_limits_replace_the_sandbox_limits_for_one_run(ws):
    box = Sandbox(ws, Limits(wall_s=1), isolation="bwrap")
    assert box.run("sleep 2; echo slept").timed_out
    r = box.run("sleep 2; echo slept", limits=Limits(wall_s=10))
    assert r.stdout == b"slept\n" and not r.timed_out
    r = box.run("sleep 2; echo slept", limits=Limits(wall_s=10), timeout_s=0.5)  # timeout_s still shortens
    assert r.timed_out and r.duration_s < 3
    assert box.limits == Limits(wall_s=1)


@needs_bwrap
@needs_root
def test_files_of_an_earlier_run_stay_usable_including_hard_links(ws):
    box = Sandbox(ws, LIMITS, isolation="bwrap")
    r = box.run("umask 077; echo one > a; ln a b; mkdir d; echo two > d/c; id -u")
    assert r.exit_code == 0, r
    r2 = box.run("echo more >> b; cat a d/c; echo three > d/e; id -u")  # another run, another uid
    assert r2.exit_code == 0 and r2.stdout.split()[:4] == [b"one", b"more", b"two", r2.stdout.split()[-1]], r2
    assert r.stdout.split()[-1] != r2.stdout.split()[-1]


@pytest.mark.skipif(not unshare_available(), reason="unshare cannot start here")
def test_unshare_starts_when_a_hidden_path_lies_under_tmp(ws, tmp_path):
    """A checkout under /tmp (CI's clean clone) puts the package there: /tmp's fresh tmpfs hides it."""
    secret = tmp_path / "pkg"
    secret.mkdir()
    (secret / "hidden.txt").write_text("answer")
    r = Sandbox(ws, isolation="unshare", hide=(secret,)).run(f"cat {secret}/hidden.txt; echo ran")
    assert b"ran" in r.stdout and b"answer" not in r.stdout
