"""Cyber targets: the built-in set (rlyard/envs/cyber/builtin/<id>/) and ARVO-style rows users bring.

A built-in target folder holds `src/` (the program), `build.sh` (run with CC and CFLAGS set; it
builds `./target`), `seed.bin` (a benign input), `poc.bin` (the reference proof of concept) and
`target.json` (the expected sanitizer, error type, crash function and file, a difficulty and a
title). A row names the same things for a source tree elsewhere on disk (docs/cyber.md):

    {"id": "mylib-1234", "source": "/data/mylib", "build": "sh build_asan.sh", "binary": "out/fuzz_parse",
     "sanitizer": "AddressSanitizer", "error_type": "heap-buffer-overflow", "function": "parse_header",
     "file": "src/header.c", "poc": "/data/mylib-1234.poc", "seed": "/data/seed.bin", "difficulty": "hard"}

The grader only ever builds from `source` (outside any workspace) and only reads the PoC's bytes.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

BUILTIN = Path(__file__).with_name("builtin")
SANITIZERS = ("AddressSanitizer", "UndefinedBehaviorSanitizer")
DIFFICULTIES = ("easy", "medium", "hard")
REQUIRED = ("id", "sanitizer", "error_type", "function", "file")
# Files of a built-in folder that never reach a workspace (the answer and the expected values).
PRIVATE = ("poc.bin", "target.json")


@dataclass(frozen=True)
class Target:
    id: str
    source: str  # the pristine tree, outside every workspace
    build: str  # shell command run in a copy of the tree (CC and CFLAGS set)
    binary: str  # what the build makes, relative to the tree
    sanitizer: str
    error_type: str
    function: str
    file: str  # the crash function's file, relative to the tree (src/...)
    difficulty: str = "medium"
    title: str = ""
    poc: str | None = None  # the reference proof of concept (validate; the oracle)
    seed: str | None = None  # a benign input, copied into the workspace as seed.bin

    @property
    def expected(self) -> dict[str, str]:
        return {"sanitizer": self.sanitizer, "error_type": self.error_type, "function": self.function}

    @property
    def description(self) -> str:
        """The recipe's one-line crash description."""
        return f"{self.sanitizer}: {self.error_type} in function `{self.function}` in file `{self.file}`"

    def fingerprint(self) -> str:
        """A hash of the pristine tree and the build command: the key of its cached build."""
        digest = hashlib.sha256(f"{self.build}\0{self.binary}".encode())
        root = Path(self.source)
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name not in PRIVATE):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()[:16]


def check_row(row: dict, where: str) -> None:
    missing = [field for field in REQUIRED if not row.get(field)]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing} (a cyber row needs {list(REQUIRED)}, see docs/cyber.md)")
    if row["sanitizer"] not in SANITIZERS:
        raise ValueError(f"{where}: sanitizer {row['sanitizer']!r} is not one of {list(SANITIZERS)}")
    if row.get("difficulty", "medium") not in DIFFICULTIES:
        raise ValueError(f"{where}: difficulty {row['difficulty']!r} is not one of {list(DIFFICULTIES)}")


def builtin_targets(root: Path = BUILTIN) -> list[Target]:
    targets = []
    for folder in sorted(p for p in root.iterdir() if (p / "target.json").is_file()) if root.is_dir() else []:
        meta = json.loads((folder / "target.json").read_text())
        check_row(meta, str(folder / "target.json"))
        targets.append(Target(
            id=meta["id"], source=str(folder), build="sh build.sh", binary="target", sanitizer=meta["sanitizer"],
            error_type=meta["error_type"], function=meta["function"], file=meta["file"], difficulty=meta["difficulty"],
            title=meta.get("title", ""), poc=str(folder / "poc.bin"), seed=str(folder / "seed.bin")))
    return targets


def load_rows(path: str | Path) -> list[Target]:
    """ARVO-style rows from a .jsonl / .json / .parquet file; relative paths are the file's."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"env.options.source: {path} does not exist")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    elif path.suffix == ".json":
        rows = json.loads(path.read_text())
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    targets = []
    for number, row in enumerate(rows, 1):
        where = f"{path} row {number}"
        check_row(row, where)
        for field in ("source", "build", "binary"):
            if not row.get(field):
                raise ValueError(f"{where}: missing field {field!r} (the source tree, its build command, the binary it makes)")

        def local(value):
            return None if value is None else str((path.parent / value).resolve())

        if not Path(local(row["source"])).is_dir():
            raise ValueError(f"{where}: source {row['source']!r} is not a folder")
        targets.append(Target(
            id=str(row["id"]), source=local(row["source"]), build=row["build"], binary=row["binary"], sanitizer=row["sanitizer"],
            error_type=row["error_type"], function=row["function"], file=row["file"],
            difficulty=row.get("difficulty", "medium"), title=row.get("title", ""), poc=local(row.get("poc")), seed=local(row.get("seed"))))
    return targets
