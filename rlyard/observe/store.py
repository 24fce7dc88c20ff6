"""Append-only jsonl files that survive a killed run: the trajectory store and its helpers.

A run can be killed at any byte. Appends therefore fsync, readers skip a half-written last
line, and a resumed run cuts the file back to its checkpoint step with an atomic rewrite, so
no step is ever recorded twice. `metrics.py` and `plots.py` reuse the helpers below.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from rlyard.types import Trajectory

TRAJECTORIES_FILE = "trajectories.jsonl"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a jsonl file; skips a last line that a killed writer left unfinished.

    Lines are decoded one by one from bytes: a cut can fall inside a multi-byte UTF-8
    character, which would make a text-mode read of the whole file fail.
    A bad line anywhere else is real corruption and raises.
    """
    with open(path, "rb") as f:
        lines = f.readlines()
    rows: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:  # JSONDecodeError and UnicodeDecodeError
            if i == len(lines) - 1 and not line.endswith(b"\n"):
                break
            raise ValueError(f"{path}:{i + 1}: line is not valid JSON") from None
    return rows


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so readers see the old file or the new one, never half of one.

    The temp file lives in the same directory because os.replace is only atomic within one
    filesystem.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def keep_through_step(path: Path, step: int) -> None:
    """Atomically rewrite a jsonl file keeping rows with row["step"] <= step (resume)."""
    kept = [row for row in read_jsonl(path) if row["step"] <= step]
    write_atomic(path, "".join(_line(row) for row in kept).encode("utf-8"))


def _line(row: dict[str, Any]) -> str:
    # ensure_ascii=False keeps completions in other scripts readable in a plain `less`.
    # default=str: a grader's details (Reward.info) may hold paths or other non-JSON values
    return json.dumps(row, ensure_ascii=False, default=str) + "\n"


def _drop_partial_tail(path: Path) -> None:
    """Cut an unfinished last line so the next append does not glue onto it."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data.endswith(b"\n"):
            return
        f.truncate(data.rfind(b"\n") + 1)
        f.flush()
        os.fsync(f.fileno())


def trajectories_file(path: Path) -> Path:
    """The trajectories file `path` names: the jsonl file itself, or a run or evaluation folder
    (anything not ending in .jsonl) holding trajectories.jsonl."""
    path = Path(path)
    return path if path.suffix == ".jsonl" else path / TRAJECTORIES_FILE


class TrajectoryStore:
    """Every trajectory of a run, one readable jsonl row each, tagged with its step.

    `path` is the jsonl file itself, or a run directory (anything not ending in .jsonl),
    in which case the file is `path / "trajectories.jsonl"`.
    """

    def __init__(self, path: Path) -> None:
        self.path = trajectories_file(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Healed on the first append rather than here: a viewer may open a store to read it
        # while the trainer is mid-write, and must not cut the trainer's line.
        self._healed = False

    def append(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Write all of one step's rows with a single write, then fsync.

        One write keeps a step's rows together; if the run dies mid-write, only a cut last
        line can result, which readers skip and the next append or resume removes.
        """
        if not rows:
            return
        if not self._healed:
            _drop_partial_tail(self.path)
            self._healed = True
        data = "".join(_line({**row, "step": step}) for row in rows).encode("utf-8")
        with open(self.path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def truncate_after(self, step: int) -> None:
        """Drop rows of steps after `step`: a resumed run redoes those steps."""
        if self.path.exists():
            keep_through_step(self.path, step)
        self._healed = True  # the rewrite leaves only whole lines

    def read(self) -> list[dict[str, Any]]:
        """All rows so far (empty before the first append)."""
        return read_jsonl(self.path) if self.path.exists() else []


def prompt_text(traj: Trajectory, tokenizer: Any) -> str:
    """The prompt a trajectory was sampled from, as the model saw it (special tokens kept)."""
    return tokenizer.decode(traj.token_ids[: traj.prompt_length], skip_special_tokens=False)


def trajectory_row(traj: Trajectory, prompt_text: str, *, tokenizer: Any = None,
                   advantage: float | None = None) -> dict[str, Any]:
    """The human-readable part of a trajectory: text and reward, no raw token id lists.

    With `tokenizer`, the row also gets `segments`: everything after the prompt cut into runs
    of trained (sampled) and untrained (tool output, template) tokens, which is what `rlyard
    view` shows as the loss mask. Sampled runs keep each token's text and behaviour logprob
    (3 decimals) for the hover; untrained runs keep only their text, so a row grows by about
    16 bytes per sampled token (measured on an agentic_quickstart run).
    """
    row = {
        "task_id": traj.task_id,
        "group_id": traj.group_id,
        "prompt": prompt_text,
        "completion": traj.completion_text,
        "num_tokens": traj.num_sampled_tokens,
        "reward": traj.reward,
        "components": dict(traj.components),
        "finish_reason": traj.finish_reason,
        "infra_error": traj.infra_error,
        "turns": traj.turns,
        "policy_versions": sorted({v for v, m in zip(traj.policy_versions, traj.loss_mask) if m}),
        "info": {key: _cut(value) for key, value in traj.info.items()},
    }
    if advantage is not None:
        row["advantage"] = advantage
    if tokenizer is not None:
        row["segments"] = token_segments(traj, tokenizer)
    return row


def token_segments(traj: Trajectory, tokenizer: Any) -> list[dict[str, Any]]:
    """Runs of equal loss mask after the prompt: {"sampled": true, "pieces", "logprobs"} or
    {"sampled": false, "text"}.

    A token that ends inside a multi-byte character decodes to U+FFFD on its own; it is joined
    with the following tokens until the text is whole, and the piece's logprob is their sum, so
    the pieces always concatenate to the decoded text.
    """
    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    start, mask = traj.prompt_length, traj.loss_mask
    segments: list[dict[str, Any]] = []
    while start < len(mask):
        end = start
        while end < len(mask) and mask[end] == mask[start]:
            end += 1
        if not mask[start]:
            segments.append({"sampled": False, "text": decode(traj.token_ids[start:end])})
        else:
            pieces, logprobs, pending, pending_logprob = [], [], [], 0.0
            for i in range(start, end):
                pending.append(traj.token_ids[i])
                pending_logprob += traj.behaviour_logprobs[i]
                text = decode(pending)
                if text.endswith("\ufffd") and i + 1 < end:
                    continue
                pieces.append(text)
                logprobs.append(round(pending_logprob, 3))
                pending, pending_logprob = [], 0.0
            segments.append({"sampled": True, "pieces": pieces, "logprobs": logprobs})
        start = end
    return segments


INFO_TEXT_CHARS = 8000  # a grader's text output kept per trajectory row


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > INFO_TEXT_CHARS:
        return value[:INFO_TEXT_CHARS] + f"\n[... {len(value) - INFO_TEXT_CHARS} more characters]"
    return value
