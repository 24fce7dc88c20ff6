"""Sandbox: basic function, then a security suite of hostile programs.

Each hostile test checks two things: the program is contained with the right error, and the
host is unchanged (files, processes, the test runner itself). The hostile tests need a working
bubblewrap or unshare and are skipped where neither can start a sandbox.
"""
import os
import resource
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlyard.sandbox import Limits, Sandbox, SandboxError, SandboxUnavailable, UidPool
from rlyard.sandbox.mounts import remove_workspace
from rlyard.sandbox.sandbox import bwrap_available, unshare_available
from rlyard.sandbox.uids import default_pool

LIMITS = Limits(wall_s=10, cpu_s=2, memory_bytes=512 << 20, nproc=48, fsize_bytes=1 << 20,
                nofile=64, output_bytes=64 << 10, output_kill_bytes=8 << 20, tmp_bytes=8 << 20)
HAVE_BWRAP = bwrap_available()
HAVE_UNSHARE = unshare_available()
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap cannot start a sandbox here")
ISOLATIONS = [pytest.param("bwrap", marks=needs_bwrap),
              pytest.param("unshare", marks=pytest.mark.skipif(not HAVE_UNSHARE, reason="no unshare"))]
AS_ROOT = os.geteuid() == 0
SANDBOX_UID = 65534 if AS_ROOT else os.geteuid()


@pytest.fixture
def ws(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def box(ws):
    if not HAVE_BWRAP:
        pytest.skip("bubblewrap cannot start a sandbox here")
    return Sandbox(ws, LIMITS, isolation="bwrap")


def host_processes(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (read from /proc, as the brief asks)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def pool_processes(pool=None) -> list[int]:
    """Host processes running as any uid of the sandbox uid pool (every run gets one of them)."""
    pool = pool or default_pool()
    return [pid for pid in all_pids() if pool.owns(real_uid(pid))]


def all_pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def real_uid(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return -1
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


# ---------------------------------------------------------------- basic function


def test_echo_exit_code_and_stderr(box):
    r = box.run("echo hello; echo oops >&2; exit 7")
    assert (r.exit_code, r.stdout, r.stderr) == (7, b"hello\n", b"oops\n")
    assert not r.timed_out and r.killed_reason is None and not r.truncated and r.duration_s < 5


def test_argv_command_and_stdin(box):
    assert box.run(["cat"], stdin="from stdin").stdout == b"from stdin"
    big = os.urandom(300_000)  # bigger than a pipe buffer: stdin is fed while output is read
    r = box.run(["python3", "-c", "import sys; d=sys.stdin.buffer.read(); print(len(d))"], stdin=big)
    assert r.stdout == b"300000\n"


def test_workspace_is_cwd_and_writable_and_visible_to_host(box, ws):
    (ws / "given.txt").write_text("from host")
    r = box.run("cat given.txt; echo from-sandbox > made.txt; pwd")
    assert r.exit_code == 0 and r.stdout == b"from host/workspace\n"
    assert (ws / "made.txt").read_text() == "from-sandbox\n"
    assert box.run("cat made.txt").stdout == b"from-sandbox\n"


def test_python3_available_and_unprivileged(box):
    r = box.run(["python3", "-c", "import os, sys; print(sys.version_info[0], os.getuid())"])
    assert r.exit_code == 0 and r.stdout.split()[0] == b"3"
    assert int(r.stdout.split()[1]) != 0


def test_timeout_reports_timed_out(box):
    r = box.run("sleep 30", timeout_s=0.5)
    assert r.timed_out and r.killed_reason == "wall_time" and r.exit_code == -9 and r.duration_s < 3


def test_refuses_without_isolation_unless_explicitly_unsafe(ws):
    with pytest.raises(SandboxUnavailable):
        Sandbox(ws, LIMITS, isolation="none")
    r = Sandbox(ws, LIMITS, isolation="none", allow_unsafe=True).run("echo unsafe")
    assert r.stdout == b"unsafe\n"


def test_a_sandbox_that_cannot_start_raises_sandbox_error(box, ws):
    remove_workspace(ws)  # the folder and the tmpfs the sandbox may have mounted on it
    ws.write_text("not a directory any more")  # bwrap cannot bind it: infra failure, not a 0
    with pytest.raises(SandboxError):
        box.run("echo hi")


# ---------------------------------------------------------------- hostile programs

FORK_BOMB = """
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print("blocked", n, e.errno, flush=True)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_fork_bomb_is_capped_by_nproc(ws, tmp_path, isolation):
    # a pool of its own: other sandboxes on this machine (other tests, other runs) use the default one
    pool = UidPool(base=3_000_000 + secrets.randbelow(1 << 20) * 16, size=16, lock_dir=tmp_path / "uids")
    box = Sandbox(ws, LIMITS, isolation=isolation, uid_pool=pool)
    r = box.run(["python3", "-c", FORK_BOMB], timeout_s=8)
    words = r.stdout.split()
    assert words[:1] == [b"blocked"], r
    assert int(words[1]) < LIMITS.nproc and int(words[2]) == 11  # EAGAIN
    # the classic shell bomb: contained, ends at the wall limit, the host keeps working
    r = box.run(":(){ :|:& };:; sleep 30", timeout_s=2)
    assert r.duration_s < 6
    if AS_ROOT:
        assert pool_processes(pool) == []  # every bomb process is gone from the host


def test_memory_bomb_hits_the_address_space_limit(box):
    r = box.run(["python3", "-c", "x = bytearray(2 << 30)"])
    assert r.exit_code != 0 and b"MemoryError" in r.stderr
    r = box.run(["python3", "-c", "l = []\nwhile True: l.append(bytearray(16 << 20))"])
    assert r.exit_code != 0 and b"MemoryError" in r.stderr and r.duration_s < 8


def test_endless_loop_wall_time(box):
    r = box.run("while :; do :; done", timeout_s=1)
    assert r.timed_out and r.killed_reason == "wall_time" and r.duration_s < 3


def test_endless_loop_cpu_time(box):
    r = box.run(["python3", "-c", "while True: pass"])
    assert r.killed_reason == "cpu_time" and not r.timed_out and r.exit_code == 128 + 24
    assert r.duration_s < 9  # cpu_s=2, before the 10 s wall limit even on a busy machine


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_cannot_connect_to_host_loopback_server(ws, isolation):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(5)
    accepted = []
    thread = threading.Thread(target=lambda: _accept(server, accepted), daemon=True)
    thread.start()
    port = server.getsockname()[1]
    probe = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
    r = Sandbox(ws, LIMITS, isolation=isolation).run(["python3", "-c", probe])
    assert r.exit_code != 0 and b"connected" not in r.stdout
    assert b"ConnectionRefusedError" in r.stderr or b"unreachable" in r.stderr.lower()
    socket.create_connection(("127.0.0.1", port), timeout=2).close()  # the server is reachable from the host
    thread.join(5)
    assert accepted == ["host"]
    server.close()


def _accept(server, accepted):
    try:
        conn, _ = server.accept()
        accepted.append("host")
        conn.close()
    except OSError:
        pass


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_cannot_write_outside_the_workspace(ws, tmp_path, isolation):
    box = Sandbox(ws, LIMITS, isolation=isolation)
    marker = "rlyard_sbx_" + secrets.token_hex(6)
    project = Path(__file__).resolve().parent.parent
    targets = [f"/tmp/{marker}", f"/var/tmp/{marker}", f"/dev/shm/{marker}", f"{project}/{marker}",
               f"{tmp_path}/{marker}", f"/{marker}", f"/usr/{marker}", f"/etc/{marker}", f"{Path.home()}/{marker}"]
    r = box.run("; ".join(f"echo pwned > {t}" for t in targets) + "; ls /tmp")
    for t in targets:
        assert not os.path.exists(t), t
    assert b"Read-only file system" in r.stderr or b"No such file" in r.stderr or b"denied" in r.stderr


def test_cannot_read_a_secret_outside_the_workspace(box, tmp_path):
    token = secrets.token_hex(16)
    secret = tmp_path / "secret.txt"
    secret.write_text(token)
    secret.chmod(0o644)  # readable by anyone on the host: only isolation may hide it
    project = Path(__file__).resolve().parent.parent
    r = box.run(f"cat {secret}; cat {project}/pyproject.toml; ls {Path.home()}; ls /work;"
                f" grep -rs {token} /tmp /etc /workspace /proc/1/cwd 2>/dev/null | head", timeout_s=8)
    assert token.encode() not in r.stdout + r.stderr
    assert b"[project]" not in r.stdout  # the project is not visible either


def test_symlink_out_of_the_workspace_reads_and_writes_nothing(box, ws, tmp_path):
    token = secrets.token_hex(16)
    secret = tmp_path / "host_file.txt"
    secret.write_text(token)
    before = secret.stat()
    (ws / "planted").symlink_to(secret)  # e.g. left by a repository snapshot
    r = box.run("cat planted; echo overwritten > planted; echo more >> planted;"
                " ln -s /etc/passwd made && echo x >> made; cat planted")
    assert token.encode() not in r.stdout + r.stderr
    assert secret.read_text() == token
    after = secret.stat()
    assert (after.st_uid, after.st_mode, after.st_mtime_ns) == (before.st_uid, before.st_mode, before.st_mtime_ns)
    assert b"root:" in Path("/etc/passwd").read_bytes() and b"\nx\n" not in Path("/etc/passwd").read_bytes()[-3:]


def test_killing_the_parent_and_init_leaves_the_host_alive(box):
    bystander = subprocess.Popen(["sleep", "60"])  # a host process the sandbox must not reach
    try:
        runner = os.getpid()
        r = box.run(f"kill -9 $PPID; kill -9 1; kill -9 {runner}; kill -9 {bystander.pid}; kill -9 -1; echo still")
        assert not r.timed_out and r.duration_s < 5
        assert bystander.poll() is None  # still running
        os.kill(runner, 0)  # the test runner is alive (we are running this line)
        assert box.run("echo next").stdout == b"next\n"  # and the sandbox still works
    finally:
        bystander.kill()
        bystander.wait()


def test_stdout_flood_is_capped_and_memory_bounded(ws):
    if not HAVE_BWRAP:
        pytest.skip("bubblewrap cannot start a sandbox here")
    limits = Limits(wall_s=10, output_bytes=64 << 10, output_kill_bytes=300 << 20)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    r = Sandbox(ws, limits, isolation="bwrap").run("yes flood; ", timeout_s=8)
    assert r.truncated and len(r.stdout) == 64 << 10 and r.stdout.startswith(b"flood\n")
    assert r.killed_reason in ("output_limit", "wall_time")
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    assert grown_mib < 64, f"runner grew {grown_mib:.0f} MiB while reading 300 MiB of output"


def test_filling_the_disk_hits_the_file_size_and_tmpfs_limits(box, ws):
    free_before = shutil.disk_usage(ws).free
    r = box.run("dd if=/dev/zero of=big bs=64k count=1000")
    assert r.killed_reason == "file_size" and r.exit_code == 128 + 25
    assert (ws / "big").stat().st_size <= LIMITS.fsize_bytes
    # /tmp is a small private tmpfs: many small files run out of space, the host /tmp is untouched
    marker = "fill_" + secrets.token_hex(4)
    r = box.run(f"mkdir /tmp/{marker}; i=0; while [ $i -lt 20 ]; do head -c 900000 /dev/zero > /tmp/{marker}/f$i"
                " || { echo full; break; }; i=$((i+1)); done")
    assert b"full" in r.stdout and b"No space left" in r.stderr
    assert not os.path.exists(f"/tmp/{marker}")
    assert free_before - shutil.disk_usage(ws).free < 64 << 20


def test_setuid_attempts_stay_unprivileged(box, ws):
    shutil.copy("/usr/bin/id", ws / "suid_id")
    os.chmod(ws / "suid_id", 0o4755)  # setuid copy (root-owned if we are root)
    probe = "import os\ntry:\n    os.setuid(0)\n    print('ROOT')\nexcept PermissionError:\n    print('denied')"
    r = box.run(f"./suid_id -u; su -c id root </dev/null; python3 -c \"{probe}\"; id -u")
    lines = r.stdout.split()
    assert b"ROOT" not in r.stdout and b"denied" in lines
    assert lines[0] == lines[-1] and (default_pool().owns(int(lines[0])) if AS_ROOT else int(lines[0]) == SANDBOX_UID)
    assert b"uid=0" not in r.stdout
    st = os.lstat(ws / "suid_id")  # a root-owned setuid file never survives into the sandbox
    assert not (st.st_uid == 0 and st.st_mode & stat.S_ISUID)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_background_processes_do_not_survive(ws, isolation):
    box = Sandbox(ws, LIMITS, isolation=isolation)
    n = {"bwrap": 1000, "unshare": 2000}[isolation]  # markers of its own: under xdist the other isolation runs at once
    for _ in range(5):  # repeated: the namespace's teardown must be finished when run() returns
        r = box.run(f"nohup sleep {n}.5 >/dev/null 2>&1 & setsid sleep {n}.25 >/dev/null 2>&1 &"
                    f" (sleep {n}.75 &) ; echo started")
        assert r.exit_code == 0 and r.stdout == b"started\n" and r.duration_s < 4
        for marker in (f"sleep {n}.5", f"sleep {n}.25", f"sleep {n}.75"):
            assert host_processes(marker) == [], marker
    # and when the run ends by timeout rather than exit
    r = box.run(f"sleep {n}.125 & while :; do :; done", timeout_s=1)
    assert r.timed_out and host_processes(f"sleep {n}.125") == []


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_sandbox_dies_with_a_killed_caller(ws, isolation):
    caller = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from rlyard.sandbox import Sandbox, Limits\n"
        f"Sandbox(Path({str(ws)!r}), Limits(wall_s=60), isolation={isolation!r}).run('sleep 1000.0625')")])
    deadline = time.monotonic() + 10
    while not host_processes("sleep 1000.0625") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes("sleep 1000.0625"), "the sandbox never started"
    caller.kill()  # rlyard itself dies mid-run (SIGKILL: no cleanup code runs)
    caller.wait()
    deadline = time.monotonic() + 5
    while host_processes("sleep 1000.0625") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes("sleep 1000.0625") == []
