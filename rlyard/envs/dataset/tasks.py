"""Your own prompts as tasks: one row of a file per task, its other columns for the reward.

A row's prompt is a string (shown to the policy as one user message, and given to the reward
functions as a string, like TRL's "standard" format) or a list of chat messages ("conversational":
the reward functions get message lists). The held-out split is a stable hash of the prompt, so a
prompt repeated in the file never sits on both sides, and no seed or option moves a row across.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from rlyard.envs.dataset.readers import DatasetError, read_numbered_rows, saved_splits
from rlyard.envs.splits import merge_options
from rlyard.types import Task

NAME = "dataset"
DEFAULTS: dict[str, Any] = {
    "path": None,  # the prompt file or datasets folder (required)
    "eval_path": None,  # a separate held-out file; None = hold out eval_fraction of path
    "train_split": None,  # a datasets folder's split to train on (default "train")
    "eval_split": None,  # a datasets folder's held-out split (default "test" or "validation" when there is one)
    "eval_fraction": 0.1,  # share of rows held out when there is no eval_path / eval_split
    "prompt_column": "prompt",
    "id_column": None,  # a column of unique ids; None = file name and row number
    "columns": None,  # the columns the reward gets: None = all, a list keeps those, {argument: column} renames
    "system_prompt": None,  # a system message put before each prompt that has none
}
ROLES = ("system", "user", "assistant", "tool")
RESERVED = ("prompts", "completions", "completion_ids", "log_extra", "log_metric")


def make_tasks(split: str, n: int, seed: int = 0, **options) -> list[Task]:
    """The first `n` tasks of `split` ("train" or "eval"); `seed` plays no part (the split is the data's)."""
    opts = merge_options(NAME, split, n, options, DEFAULTS)
    if not opts["path"]:
        raise DatasetError("env.options.path: the dataset family reads prompts from a file; set env.options.path=FILE "
                           "(.jsonl, .json, .parquet, .csv or a datasets folder)")
    fraction = opts["eval_fraction"]
    if not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise DatasetError(f"env.options.eval_fraction: must be in [0, 1), got {fraction!r}")
    key = json.dumps({k: v for k, v in opts.items()}, sort_keys=True, default=str)
    return list(_tasks(key, _stamp(opts["path"]), _stamp(opts["eval_path"]))[split][:n])


def _stamp(path: str | None) -> tuple:
    """What invalidates the cache: the file's identity and modification time."""
    if not path:
        return ()
    target = Path(path).expanduser()
    return (str(target.resolve()), target.stat().st_mtime_ns) if target.exists() else (str(target),)


@functools.lru_cache(maxsize=8)
def _tasks(key: str, *stamps) -> dict[str, list[Task]]:
    opts = json.loads(key)
    path = opts["path"]
    eval_split = opts["eval_split"]
    if eval_split is None and not opts["eval_path"]:
        eval_split = next((name for name in ("test", "validation") if name in saved_splits(path)), None)
    train_rows = _tasks_of(path, read_numbered_rows(path, opts["train_split"]), opts)
    if opts["eval_path"]:
        return {"train": train_rows, "eval": _tasks_of(opts["eval_path"], read_numbered_rows(opts["eval_path"]), opts)}
    if eval_split is not None:
        return {"train": train_rows, "eval": _tasks_of(path, read_numbered_rows(path, eval_split), opts, prefix=eval_split)}
    held_out = [held_out_row(task.prompt, opts["eval_fraction"]) for task in train_rows]
    return {"train": [t for t, out in zip(train_rows, held_out) if not out],
            "eval": [t for t, out in zip(train_rows, held_out) if out]}


def held_out_row(prompt: list[dict], fraction: float) -> bool:
    digest = hashlib.sha256(("rlyard/dataset/" + json.dumps(prompt, sort_keys=True)).encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10_000 < round(fraction * 10_000)


def _tasks_of(path: str, rows: list[tuple[str, dict[str, Any]]], opts: dict[str, Any], prefix: str = "") -> list[Task]:
    """`rows`: (where, row) pairs; a task's default id counts rows (blank lines do not move it)."""
    stem = (prefix + "-" if prefix else "") + Path(path).stem
    tasks, seen = [], set()
    for number, (line, row) in enumerate(rows, 1):
        where = f"{path} {line}"
        task = row_task(row, where, opts, default_id=f"{stem}-{number}")
        if task.id in seen:
            raise DatasetError(f"{where}: id {task.id!r} (column {opts['id_column']!r}) is used by an earlier row")
        seen.add(task.id)
        tasks.append(task)
    return tasks


def row_task(row: dict[str, Any], where: str, opts: dict[str, Any], default_id: str) -> Task:
    prompt_column = opts["prompt_column"]
    if prompt_column not in row:
        raise DatasetError(f"{where}: no column {prompt_column!r} (its columns: {', '.join(row) or 'none'}); "
                           "name the prompt column with env.options.prompt_column")
    prompt, fmt = _messages(row[prompt_column], where, prompt_column)
    system = opts["system_prompt"]
    if system and prompt[0]["role"] != "system":
        prompt = [{"role": "system", "content": str(system)}, *prompt]
    payload = _columns(row, where, opts)
    task_id = default_id
    if opts["id_column"] is not None:
        if opts["id_column"] not in row:
            raise DatasetError(f"{where}: no id column {opts['id_column']!r} (env.options.id_column)")
        task_id = str(row[opts["id_column"]])
    metadata = {"prompt_format": fmt, "source": where}
    if fmt == "standard":
        metadata["prompt_text"] = row[prompt_column]
    return Task(id=task_id, prompt=prompt, env=NAME, payload=payload, metadata=metadata)


def _messages(value: Any, where: str, column: str) -> tuple[list[dict[str, str]], str]:
    if isinstance(value, str):
        if not value.strip():
            raise DatasetError(f"{where}: column {column!r} is empty")
        return [{"role": "user", "content": value}], "standard"
    if not isinstance(value, list) or not value:
        raise DatasetError(f"{where}: column {column!r} must be a string or a non-empty list of chat messages, "
                           f"got {type(value).__name__}")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
            raise DatasetError(f"{where}: {column}[{index}] must be {{\"role\": one of {', '.join(ROLES)}, "
                               f"\"content\": a string}}, got {message!r:.120}")
        messages.append({"role": message["role"], "content": message["content"]})
    return messages, "conversational"


def _columns(row: dict[str, Any], where: str, opts: dict[str, Any]) -> dict[str, Any]:
    """The row's columns the reward functions get, under the names they take them by."""
    chosen = opts["columns"]
    if chosen is None:
        mapping = {name: name for name in row if name != opts["prompt_column"]}
    elif isinstance(chosen, list):
        mapping = {name: name for name in chosen}
    elif isinstance(chosen, dict):
        mapping = dict(chosen)
    else:
        raise DatasetError(f"env.options.columns: a list of columns or a mapping {{argument: column}}, got {chosen!r}")
    payload = {}
    for argument, column in mapping.items():
        if argument in RESERVED:
            raise DatasetError(f"{where}: column {column!r} would reach the reward as {argument!r}, which rlyard passes "
                               f"itself; rename it with env.options.columns (e.g. {{my_{argument}: {column}}})")
        if column not in row:
            raise DatasetError(f"{where}: no column {column!r} (env.options.columns; its columns: {', '.join(row)})")
        payload[argument] = row[column]
    return payload
