"""The /proc readers shared by the sandbox and the browser box (rlyard/sandbox/procfs.py)."""
import os
import shutil
import subprocess

from rlyard.sandbox.procfs import all_pids, proc_stat, real_uid, rss_bytes


def test_a_process_named_with_a_parenthesis_and_spaces_is_read_right_then_gone(tmp_path):
    odd = tmp_path / "a) b (c"  # a command name that ends a naive parse of /proc/PID/stat early
    shutil.copy(shutil.which("sleep"), odd)
    child = subprocess.Popen([str(odd), "30"], start_new_session=True)
    try:
        found = proc_stat(child.pid)
        assert found is not None
        assert found.comm == "a) b (c"
        assert found.state in "RSD"
        assert found.ppid == os.getpid()
        assert found.session == child.pid  # start_new_session: it leads its own session
        assert rss_bytes(child.pid) > 0
        assert real_uid(child.pid) == os.getuid()
        assert child.pid in all_pids()
    finally:
        child.kill()
        child.wait()
    assert proc_stat(child.pid) is None
    assert rss_bytes(child.pid) == 0
    assert real_uid(child.pid) is None
