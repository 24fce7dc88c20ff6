"""The reward journal of a live run: every posted reward, on disk before the client hears 2xx.

`rewards.jsonl` in the run folder holds one line per rewarded session: its id, reward and
components, its group (or none), and its trajectories (tokens, behaviour logprobs, policy
versions), so a server killed with SIGKILL loses none of them: the recorded session lives in
memory until its reward, and from then on in this file. Each line is written, flushed and
fsynced under a lock before `append` returns; a line cut short by a kill mid-write has no
newline and is ignored on reading (its client got no 2xx, so it posts again).

Which lines have been trained (or dropped as stale) is not written here but kept in each
checkpoint (`consumed`): a restart replays the lines its checkpoint has not consumed, so a
reward trained after the last checkpoint (whose update the kill lost) is trained again, once.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlyard.types import Trajectory

JOURNAL_FILE = "rewards.jsonl"


@dataclass
class Entry:
    """One rewarded session."""

    seq: int  # its line number in the journal (0-based): what checkpoints count as consumed
    session: str
    reward: float
    components: dict[str, float]
    group: str | None  # a GRPO group (n > 1 request, metadata.group) or None: trained against the baseline
    trajectories: list[Trajectory]
    source: str = "posted"  # or "grader" (the session was closed and graded by the server)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"seq": self.seq, "session": self.session, "reward": self.reward, "components": self.components,
                           "group": self.group, "source": self.source, "extra": self.extra,
                           "trajectories": [t.to_dict() for t in self.trajectories]})

    @classmethod
    def from_json(cls, line: str) -> "Entry":
        row = json.loads(line)
        return cls(row["seq"], row["session"], row["reward"], row["components"], row["group"],
                   [Trajectory.from_dict(t) for t in row["trajectories"]], row.get("source", "posted"), row.get("extra", {}))


class RewardJournal:
    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / JOURNAL_FILE
        self.lock = threading.Lock()
        self.entries: dict[str, Entry] = {}  # session id -> its entry
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        data = self.path.read_bytes()
        whole = data[: data.rfind(b"\n") + 1]  # a last line without its newline was cut by a kill: never acknowledged
        if len(whole) != len(data):
            with open(self.path, "r+b") as f:
                f.truncate(len(whole))
        for line in whole.decode().splitlines():
            entry = Entry.from_json(line)
            self.entries[entry.session] = entry

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, session: str) -> Entry | None:
        return self.entries.get(session)

    def append(self, session: str, reward: float, components: dict[str, float], group: str | None,
               trajectories: list[Trajectory], source: str = "posted", extra: dict[str, Any] | None = None) -> Entry:
        """Write the entry durably (fsync) and return it; the caller answers 2xx only after this."""
        with self.lock:
            if session in self.entries:
                raise KeyError(f"session {session!r} is already in the journal")
            entry = Entry(len(self.entries), session, float(reward), dict(components), group, trajectories, source, extra or {})
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(entry.to_json() + "\n")
                f.flush()
                os.fsync(f.fileno())
            self.entries[session] = entry
            return entry

    def unconsumed(self, consumed: set[int]) -> list[Entry]:
        """The entries a checkpoint has not trained or dropped, in journal order (replayed at a restart)."""
        return sorted((e for e in self.entries.values() if e.seq not in consumed), key=lambda e: e.seq)
