"""Reading /proc for the sandbox and the browser box: one parser, tolerant of processes that exit.

A process may exit between listing /proc and reading its files, so every reader returns None
(or 0) for a process that is gone instead of raising.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

PAGE = os.sysconf("SC_PAGE_SIZE")


class ProcStat(NamedTuple):
    comm: str
    state: str
    ppid: int
    session: int


def proc_stat(pid: int) -> ProcStat | None:
    """The command name, state, parent and session of `pid` from /proc/PID/stat, None when gone.

    The command name sits in parentheses and may itself hold ")" or spaces, so the fields are
    read after the last ")"."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
        head, tail = line.rsplit(")", 1)
        fields = tail.split()
        return ProcStat(head[head.index("(") + 1:], fields[0], int(fields[1]), int(fields[3]))
    except (OSError, ValueError, IndexError):
        return None


def rss_bytes(pid: int) -> int:
    """Resident bytes of one process (0 when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def real_uid(pid: int) -> int | None:
    """The real uid from /proc/PID/status: /proc/PID itself is root's for a non-dumpable process."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def all_pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
