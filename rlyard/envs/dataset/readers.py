"""Rows of a prompt file: JSONL, JSON, parquet, CSV / TSV, or a `datasets.save_to_disk` folder.

Every problem is reported with the file and the line or row it is on, since the person reading
the message has the file open, not rlyard's code.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from rlyard.errors import ConfigError

FORMATS = ".jsonl, .json, .parquet, .csv, .tsv, or a folder written by datasets' save_to_disk"


class DatasetError(ConfigError):
    """Bad prompt data; the message names the file and the row."""


def read_rows(path: str | Path, split: str | None = None) -> list[dict[str, Any]]:
    """The rows of `path` as dicts, in file order (`split` picks one of a DatasetDict folder's)."""
    return [row for _, row in read_numbered_rows(path, split)]


def read_numbered_rows(path: str | Path, split: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(where, row) pairs: `where` is "row N", plus "(line L)" for JSONL and CSV rows that an editor
    shows on another line (blank lines, a CSV's header, quoted line breaks)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DatasetError(f"{path}: no such file or folder (relative paths are read from {Path.cwd()})")
    if path.is_dir():
        rows = _numbered(_read_saved_dataset(path, split))
    elif path.suffix in (".jsonl", ".ndjson"):
        rows = _read_jsonl(path)
    elif path.suffix == ".json":
        rows = _read_json(path)
    elif path.suffix == ".parquet":
        rows = _numbered(_read_parquet(path))
    elif path.suffix in (".csv", ".tsv"):
        rows = _read_csv(path)
    else:
        raise DatasetError(f"{path}: unknown format {path.suffix or '(no suffix)'!r}; rlyard reads {FORMATS}")
    if not rows:
        raise DatasetError(f"{path}: no rows (the file is empty)" if path.is_file() else f"{path}: no rows")
    for where, row in rows:
        if not isinstance(row, dict):
            raise DatasetError(f"{path} {where}: a row must be an object of columns, got {type(row).__name__}")
    return rows


def _numbered(rows: list, lines: list[int] | None = None) -> list[tuple[str, Any]]:
    lines = lines or list(range(1, len(rows) + 1))
    return [(f"row {number}" + (f" (line {line})" if line != number else ""), row)
            for number, (line, row) in enumerate(zip(lines, rows), 1)]


def _text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line, line_start = data.count(b"\n", 0, error.start) + 1, data.rfind(b"\n", 0, error.start) + 1
        raise DatasetError(f"{path} line {line}: not UTF-8 (byte 0x{data[error.start]:02x} at column "
                           f"{error.start - line_start + 1}); save the file as UTF-8") from None


def _read_jsonl(path: Path, text: str | None = None) -> list[tuple[str, Any]]:
    rows, lines = [], []
    for number, line in enumerate((_text(path) if text is None else text).splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise DatasetError(f"{path} line {number}: not JSON ({error.msg} at column {error.colno})") from None
        lines.append(number)
    return _numbered(rows, lines)


def _read_json(path: Path) -> list[tuple[str, Any]]:
    text = _text(path)
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return _read_jsonl(path, text)  # JSON lines saved as .json
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise DatasetError(f"{path}: a .json file holds a list of rows (or {{\"data\": [...]}}), got {type(data).__name__}")
    return _numbered(data)


def _read_csv(path: Path) -> list[tuple[str, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(_text(path), newline=""), delimiter="\t" if path.suffix == ".tsv" else ",")
    rows, lines = [], []
    for row in reader:  # line_num: the record's last line
        rows.append(row)
        lines.append(reader.line_num)
    return _numbered(rows, lines)


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise DatasetError(f"{path}: reading parquet needs pyarrow: pip install 'rlyard[data]'") from None
    return parquet.read_table(path).to_pylist()


def _read_saved_dataset(path: Path, split: str | None) -> list[dict[str, Any]]:
    if not any((path / name).exists() for name in ("dataset_info.json", "state.json", "dataset_dict.json")):
        raise DatasetError(f"{path}: a folder must be one written by datasets' save_to_disk (it has no dataset_info.json "
                           f"or dataset_dict.json); rlyard also reads {FORMATS}")
    try:
        from datasets import DatasetDict, load_from_disk
    except ImportError:
        raise DatasetError(f"{path}: reading a datasets folder needs datasets: pip install 'rlyard[data]'") from None
    data = load_from_disk(str(path))
    if isinstance(data, DatasetDict):
        if split is None:
            split = "train" if "train" in data else next(iter(data))
        if split not in data:
            raise DatasetError(f"{path}: no split {split!r} (splits: {', '.join(data)}); set env.options.train_split / eval_split")
        data = data[split]
    return data.to_list()


def saved_splits(path: str | Path) -> list[str]:
    """The split names of a DatasetDict folder ([] for files and single datasets)."""
    marker = Path(path) / "dataset_dict.json"
    if not marker.is_file():
        return []
    return list(json.loads(marker.read_text()).get("splits", []))
