"""A SQLite index over trajectories.jsonl, so the viewer never holds a run's rows in memory.

The index keeps, per row, its byte offset and length in the jsonl file plus the columns the
tables filter and sort on; the row itself is read back with one seek when a page shows it.
It grows incrementally from the last indexed byte while the run trains: only lines that end
in a newline are taken, so a line the trainer is still writing waits for the next update.
A resumed run rewrites the file atomically (a new inode, possibly shorter): the index then
starts over. It is a cache: deleting it only costs a rebuild.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

SCHEMA_VERSION = "3"
SEARCH_CHARS = 20000  # text of one row that the search indexes
READ_CHUNK = 4 << 20

COLUMNS = ("id", "step", "task_id", "group_id", "family", "reward", "advantage", "finish_reason", "infra_error",
           "num_tokens", "turns", "versions")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS traj (
    id INTEGER PRIMARY KEY, pos INTEGER NOT NULL, len INTEGER NOT NULL, step INTEGER, task_id TEXT,
    group_id TEXT, family TEXT, reward REAL, advantage REAL, finish_reason TEXT, infra_error INTEGER,
    num_tokens INTEGER, turns INTEGER, versions TEXT);
CREATE INDEX IF NOT EXISTS traj_group ON traj (group_id, step);
CREATE VIRTUAL TABLE IF NOT EXISTS traj_text USING fts5 (text, content='');
CREATE TABLE IF NOT EXISTS groups (
    step INTEGER NOT NULL, group_id TEXT NOT NULL, task_id TEXT, family TEXT, n INTEGER, reward_sum REAL,
    rewarded INTEGER, min_reward REAL, max_reward REAL, failed INTEGER, infra INTEGER, tokens_sum REAL, first_id INTEGER,
    PRIMARY KEY (step, group_id));
"""
# Per-group sums kept as rows arrive, so the steps and groups tables never scan the trajectories.
_ADD_TO_GROUP = """
INSERT INTO groups VALUES (:step, :group_id, :task_id, :family, 1, COALESCE(:reward, 0), :rewarded, :reward, :reward,
                           :failed, :infra, :tokens, :id)
ON CONFLICT (step, group_id) DO UPDATE SET n = n + 1, reward_sum = reward_sum + COALESCE(:reward, 0),
    rewarded = rewarded + :rewarded, min_reward = COALESCE(MIN(min_reward, :reward), min_reward, :reward),
    max_reward = COALESCE(MAX(max_reward, :reward), max_reward, :reward), failed = failed + :failed,
    infra = infra + :infra, tokens_sum = tokens_sum + :tokens
"""


def search_text(row: dict[str, Any]) -> str:
    """What the text search sees: ids, the model's text, tool output and the grader's strings."""
    parts = [str(row.get("task_id", "")), str(row.get("completion", ""))]
    for segment in row.get("segments") or ():
        if not segment.get("sampled"):
            parts.append(str(segment.get("text", "")))
    parts += [str(v) for v in (row.get("info") or {}).values() if isinstance(v, (str, int, float))]
    return "\n".join(parts)[:SEARCH_CHARS]


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class TrajectoryIndex:
    """The index of one run folder's trajectories.jsonl, stored at `db_path`.

    Every method takes the one lock: a background thread calls `update` while request
    handlers query.
    """

    def __init__(self, jsonl: Path, db_path: Path, family: str = "") -> None:
        self.jsonl, self.db_path, self.default_family = Path(jsonl), Path(db_path), family
        self.lock = threading.Lock()
        self.bad_lines: list[int] = []
        self.db = sqlite3.connect(self.db_path, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA synchronous = OFF")
        self.db.executescript(_SCHEMA)
        if self._meta("schema") != SCHEMA_VERSION:
            self._reset()
        self._load_facets()

    def _load_facets(self) -> None:
        """The filter menus' values and the row count, kept in memory and grown by `_insert`."""
        db = self.db
        self.total = db.execute("SELECT COUNT(*) FROM traj").fetchone()[0]
        self.families = {r[0] for r in db.execute("SELECT DISTINCT family FROM groups")}
        self.finish_reasons = {r[0] for r in db.execute("SELECT DISTINCT finish_reason FROM traj")}
        self.step_range = tuple(db.execute("SELECT MIN(step), MAX(step) FROM groups").fetchone())

    def _meta(self, key: str) -> str | None:
        found = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return found[0] if found else None

    def _set_meta(self, **values: Any) -> None:
        self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in values.items()])

    def _reset(self) -> None:
        self.db.executescript("DROP TABLE IF EXISTS traj; DROP TABLE IF EXISTS traj_text; DROP TABLE IF EXISTS groups;"
                              "DELETE FROM meta;")
        self.db.executescript(_SCHEMA)
        self._set_meta(schema=SCHEMA_VERSION, offset=0, inode="", lines=0)
        self.db.commit()
        self.bad_lines = []
        self._load_facets()

    def update(self) -> int:
        """Index the complete lines appended since the last call; returns how many rows it added."""
        with self.lock:
            try:
                stat = os.stat(self.jsonl)
            except FileNotFoundError:
                return 0
            inode = f"{stat.st_dev}:{stat.st_ino}"
            offset = int(self._meta("offset") or 0)
            if self._meta("inode") not in ("", inode) or stat.st_size < offset:
                self._reset()
                offset = 0
            if stat.st_size == offset:
                self._set_meta(inode=inode)
                return 0
            return self._read_from(offset, inode)

    def _read_from(self, offset: int, inode: str) -> int:
        added, line_no = 0, int(self._meta("lines") or 0)
        with open(self.jsonl, "rb") as f:
            f.seek(offset)
            while True:
                chunk = f.read(READ_CHUNK)
                if not chunk:
                    break
                end = chunk.rfind(b"\n")
                if end < 0:  # one line longer than a chunk, or the half-written last line
                    more = f.readline()
                    if not more.endswith(b"\n"):
                        break
                    chunk, end = chunk + more, len(chunk) + len(more) - 1
                else:
                    f.seek(offset + end + 1)
                start = 0
                while start <= end:
                    stop = chunk.index(b"\n", start)
                    line_no += 1
                    if chunk[start:stop].strip():
                        added += self._insert(chunk[start:stop], offset + start, line_no)
                    start = stop + 1
                offset += end + 1
                self._set_meta(offset=offset, inode=inode, lines=line_no)
                self.db.commit()
        self._set_meta(inode=inode)
        self.db.commit()
        return added

    def _insert(self, line: bytes, pos: int, line_no: int) -> int:
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not an object")
        except ValueError:
            self.bad_lines.append(line_no)
            return 0
        versions, reward, step = row.get("policy_versions"), _float(row.get("reward")), row.get("step")
        step = step if isinstance(step, int) else -1  # rows always carry one; a hand-made file may not
        values = {"step": step, "task_id": str(row.get("task_id", "")), "group_id": str(row.get("group_id", "")),
                  "family": str(row.get("env") or self.default_family), "reward": reward, "rewarded": int(reward is not None),
                  "failed": int(reward is not None and reward <= 0), "infra": int(bool(row.get("infra_error"))),
                  "tokens": _float(row.get("num_tokens")) or 0.0, "finish_reason": str(row.get("finish_reason", ""))}
        cursor = self.db.execute(
            "INSERT INTO traj (pos, len, step, task_id, group_id, family, reward, advantage, finish_reason, infra_error,"
            " num_tokens, turns, versions) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (pos, len(line), step, values["task_id"], values["group_id"], values["family"], reward, _float(row.get("advantage")),
             values["finish_reason"], values["infra"], row.get("num_tokens"), row.get("turns"),
             ",".join(map(str, versions)) if isinstance(versions, list) else None))
        values["id"] = cursor.lastrowid
        self.db.execute(_ADD_TO_GROUP, values)
        self.db.execute("INSERT INTO traj_text (rowid, text) VALUES (?, ?)", (cursor.lastrowid, search_text(row)))
        self.total += 1
        self.families.add(values["family"])
        self.finish_reasons.add(values["finish_reason"])
        low, high = self.step_range
        self.step_range = (step if low is None else min(low, step), step if high is None else max(high, step))
        return 1

    # ------------------------------------------------------------------ queries
    def row(self, traj_id: int) -> dict[str, Any] | None:
        """The full jsonl row of trajectory `traj_id` plus its index columns under "_index"."""
        with self.lock:
            found = self.db.execute(f"SELECT pos, len, {', '.join(COLUMNS)} FROM traj WHERE id = ?", (traj_id,)).fetchone()
        if found is None:
            return None
        with open(self.jsonl, "rb") as f:
            f.seek(found["pos"])
            data = f.read(found["len"])
        try:
            row = json.loads(data)
        except ValueError:  # the file was rewritten since the last update (a resumed run): the next update starts over
            return None
        return {**row, "_index": {key: found[key] for key in COLUMNS}}

    def count(self) -> int:
        return self.total

    def facets(self) -> dict[str, Any]:
        with self.lock:
            return {"families": sorted(self.families), "finish_reasons": sorted(self.finish_reasons),
                    "step_min": self.step_range[0], "step_max": self.step_range[1], "bad_lines": self.bad_lines[:20]}

    def steps(self) -> list[dict[str, Any]]:
        with self.lock:
            found = self.db.execute(
                "SELECT step, SUM(n) AS n, COUNT(*) AS groups, SUM(reward_sum) / SUM(rewarded) AS mean_reward,"
                " SUM(failed) AS failed, SUM(infra) AS infra, SUM(tokens_sum) / SUM(n) AS mean_tokens"
                " FROM groups GROUP BY step ORDER BY step").fetchall()
        return [dict(r) for r in found]

    def groups(self, step: int) -> list[dict[str, Any]]:
        with self.lock:
            found = self.db.execute(
                "SELECT group_id, task_id, family, n, reward_sum / rewarded AS mean_reward, min_reward, max_reward, infra,"
                " first_id FROM groups WHERE step = ? ORDER BY first_id", (step,)).fetchall()
        return [dict(r) for r in found]

    def group_members(self, step: int, group_id: str) -> list[dict[str, Any]]:
        with self.lock:
            found = self.db.execute(f"SELECT {', '.join(COLUMNS)} FROM traj WHERE step = ? AND group_id = ? ORDER BY id",
                                    (step, group_id)).fetchall()
        return [dict(r) for r in found]

    def query(self, *, family: str = "", finish_reason: str = "", reward_min: float | None = None,
              reward_max: float | None = None, step_min: int | None = None, step_max: int | None = None,
              group_id: str = "", infra: bool | None = None, text: str = "", limit: int = 100,
              offset: int = 0) -> dict[str, Any]:
        """One page of trajectories matching every given filter, newest first (rows are appended in step
        order), and the total. A text search drives the query from the FTS index in descending rowid
        order, so the first page stops after its first hundred matches."""
        where, args, tables = [], [], "traj t"
        if text.strip():
            # one phrase, so that punctuation in ids or code is just a separator, never FTS syntax
            tables = "traj_text JOIN traj t ON t.id = traj_text.rowid"
            where.append("traj_text MATCH ?")
            args.append('"' + text.strip().replace('"', '""') + '"')
        for column, value in (("family", family), ("finish_reason", finish_reason), ("group_id", group_id)):
            if value:
                where.append(f"t.{column} = ?")
                args.append(value)
        for clause, value in (("t.reward >= ?", reward_min), ("t.reward <= ?", reward_max),
                              ("t.step >= ?", step_min), ("t.step <= ?", step_max)):
            if value is not None:
                where.append(clause)
                args.append(value)
        if infra is not None:
            where.append("t.infra_error = ?")
            args.append(int(infra))
        sql_where = ("WHERE " + " AND ".join(where)) if where else ""
        order = "traj_text.rowid DESC" if text.strip() else "t.id DESC"
        with self.lock:
            total = self.total if not where else self.db.execute(f"SELECT COUNT(*) FROM {tables} {sql_where}", args).fetchone()[0]
            found = self.db.execute(
                f"SELECT {', '.join('t.' + c for c in COLUMNS)}, g.reward_sum / g.rewarded AS group_mean FROM {tables}"
                f" LEFT JOIN groups g ON g.step = t.step AND g.group_id = t.group_id {sql_where}"
                f" ORDER BY {order} LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
        return {"total": total, "rows": [dict(r) for r in found]}

    def close(self) -> None:
        with self.lock:
            self.db.close()
