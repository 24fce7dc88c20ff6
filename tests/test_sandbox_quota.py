"""The workspace quota is kernel-enforced (issue 36): a size- and inode-limited tmpfs per
workspace, so a write past it fails with ENOSPC in the command's own output, within one call and
across calls. Played through the agent's bash tool; the shapes are the issue's (3 GiB in one call,
three calls of 1 GiB, 150,000 files), the limits small (64 MiB, 2,000 inodes) so they stop early.
Before: the periodic walk let 0-byte files, many files written between two walks, and growth spread
over several calls through.
"""
import os
from pathlib import Path

import pytest

from rlyard.agent.tools import ToolBox
from rlyard.sandbox import Limits, Sandbox, mounts
from rlyard.sandbox.sandbox import bwrap_works, unshare_available

QUOTA = 64 << 20
LIMITS = Limits(wall_s=60, cpu_s=60, memory_bytes=512 << 20, group_memory_bytes=1 << 30, fsize_bytes=4 << 30,
                workspace_bytes=QUOTA, workspace_inodes=2000, output_bytes=64 << 10)
needs_quota = pytest.mark.skipif(not (bwrap_works() and mounts.can_mount()),
                                 reason="a workspace file system needs root and bubblewrap")


def usage(root: Path) -> tuple[int, int]:
    """(bytes, entries) under root."""
    size = count = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            count += 1
            size += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return size, count


@pytest.fixture
def box(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "seed.txt").write_text("from the task\n")
    sandbox = Sandbox(tmp_path / "ws", LIMITS, isolation="bwrap")
    yield sandbox
    mounts.remove_workspace(sandbox.workspace)  # an episode's end: nothing copied back
    sandbox.close()


def call(box: Sandbox, command: str) -> str:
    return ToolBox(box, ("bash",), timeout_s=LIMITS.wall_s).call("bash", {"command": command}).content


@needs_quota
@pytest.mark.parametrize("command", [
    "dd if=/dev/zero of=big bs=1M count=3072",  # 3 GiB in one file
    "for i in $(seq 192); do head -c 16M /dev/zero > f$i || exit 1; done",  # 3 GiB in 16 MiB files
    "python3 -c \"import os\nfor i in range(3072): open(f'p{i}', 'wb').write(os.urandom(1 << 20))\"",
])
def test_one_call_of_3_gib_stops_at_the_quota(box, command):
    out = call(box, command)
    assert "No space left on device" in out, out
    assert usage(box.workspace)[0] <= QUOTA + (1 << 20)
    assert (box.workspace / "seed.txt").read_text() == "from the task\n"  # the task's files are still there


@needs_quota
def test_three_calls_of_1_gib_stop_at_the_quota(box):
    outs = [call(box, f"mkdir -p c{n} && for i in $(seq 64); do head -c 16M /dev/zero > c{n}/f$i || exit 1; done")
            for n in range(3)]
    assert all("No space left on device" in out for out in outs), outs
    assert usage(box.workspace)[0] <= QUOTA + (1 << 20)
    call(box, "rm -rf c0 c1 c2")  # freed space is usable again
    assert "[exit code 0]" in call(box, "head -c 32M /dev/zero > again")


@needs_quota
@pytest.mark.parametrize("command", [
    "python3 -c \"\nfor i in range(150000): open(f'e{i}', 'w').close()\"",  # empty files: no blocks to count
    "python3 -c \"import os\nfor i in range(150000): os.mkdir(f'd{i}')\"",
    "python3 -c \"import os\nfor i in range(150000): os.symlink('seed.txt', f'l{i}')\"",
])
def test_150000_files_stop_at_the_inode_quota(box, command):
    out = call(box, command)
    assert "No space left on device" in out, out
    assert usage(box.workspace)[1] <= 2000 + 1


@needs_quota
def test_quota_workspace_is_the_graders_between_calls_and_after_close(tmp_path):
    """The host reads the files at the workspace path between calls; close() leaves them there."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sub").mkdir()
    (ws / "sub" / "a.py").write_text("x = 1\n")
    box = Sandbox(ws, LIMITS, isolation="bwrap")
    assert "[exit code 0]" in call(box, "echo 2 > b.txt && ln -s sub/a.py link && mkfifo pipe && chmod 4755 b.txt")
    assert (ws / "b.txt").read_text() == "2\n" and os.path.ismount(ws)
    box.close()
    assert not os.path.ismount(ws)
    assert (ws / "b.txt").read_text() == "2\n" and (ws / "sub" / "a.py").read_text() == "x = 1\n"
    assert os.readlink(ws / "link") == "sub/a.py"
    assert not (ws / "b.txt").stat().st_mode & 0o6000  # no setuid file left on the host
    assert not (ws / "pipe").exists()  # special files are not copied out


@needs_quota
def test_remove_workspace_drops_the_file_system(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    box = Sandbox(ws, LIMITS, isolation="bwrap")
    call(box, "head -c 1M /dev/zero > x")
    mounts.remove_workspace(ws)
    assert not ws.exists()
    box.close()  # nothing left to do
    assert not ws.exists()


def test_fallback_is_the_walk_and_says_so(tmp_path, monkeypatch, caplog):
    """Where no file system can be mounted (not root), the periodic walk stays, logged once."""
    monkeypatch.setenv("RLYARD_SANDBOX_WORKSPACE_FS", "0")
    monkeypatch.setattr(mounts, "_can_mount", [])
    with caplog.at_level("INFO", logger="rlyard.sandbox"):
        assert not mounts.can_mount()
    assert "periodic walk" in caplog.text
    (tmp_path / "ws").mkdir()
    box = Sandbox(tmp_path / "ws", LIMITS, allow_unsafe=True)
    assert not os.path.ismount(tmp_path / "ws")
    box.close()


@needs_quota
def test_150000_files_at_the_default_quota(tmp_path):
    """The issue's own figure against the default Limits (65,536 inodes beyond the task's files)."""
    (tmp_path / "ws").mkdir()
    box = Sandbox(tmp_path / "ws", Limits(wall_s=120, cpu_s=120), isolation="bwrap")
    try:
        out = call(box, "python3 -c \"\nfor i in range(150000): open(f'e{i}', 'w').close()\"")
        assert "No space left on device" in out, out
        assert len(os.listdir(box.workspace)) <= Limits().workspace_inodes
    finally:
        mounts.remove_workspace(box.workspace)
        box.close()


@needs_quota
@pytest.mark.skipif(not unshare_available(), reason="unshare cannot start a sandbox here")
def test_the_quota_holds_under_unshare_too(tmp_path):
    """The tmpfs is the host's, so the weaker isolation gets the same bound."""
    (tmp_path / "ws").mkdir()
    box = Sandbox(tmp_path / "ws", LIMITS, isolation="unshare")
    try:
        out = [call(box, f"for i in $(seq 64); do head -c 16M /dev/zero > u{n}_$i || exit 1; done") for n in range(2)]
        assert all("No space left on device" in o for o in out), out
        assert usage(box.workspace)[0] <= QUOTA + (1 << 20)
    finally:
        mounts.remove_workspace(box.workspace)
        box.close()
