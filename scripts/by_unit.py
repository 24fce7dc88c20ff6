"""Held-out success by unit, one column per evaluation: which units each stage fixed.

    python scripts/by_unit.py OUT/episodes_sft_seed0 OUT/episodes_rl_seed0 OUT/episodes_sft_seed1 OUT/episodes_rl_seed1

A generated task's id ends in a hash of its parameters (`gen-list-chunk-off_by_one-1eb4eb689b`);
the id without that hash is its unit (template and bug kind for code). Held-out success clusters
by unit (docs/learning.md), so a stage's total hides which units moved; this prints each unit's
solved/tasks per evaluation folder (`rlyard eval --trajectories`), the units no stage fixed last.
With --paired A B (two columns' positions, from 1) it also prints the tasks B fixed and A did
not, and the reverse: the paired difference a seed's RL made over its own SFT.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

from rlyard.observe.store import read_jsonl, trajectories_file

HASH = re.compile(r"-[0-9a-f]{6,}$")


def unit_of(task_id: str) -> str:
    return HASH.sub("", task_id)


def outcomes(folder: Path) -> dict[str, bool]:
    """task id -> solved (reward 1 or more) of one evaluation folder; infra failures left out."""
    path = trajectories_file(folder)
    if not path.exists():
        sys.exit(f"by_unit: {path} does not exist (an `rlyard eval --trajectories` folder)")
    return {row["task_id"]: float(row.get("reward", 0.0)) >= 1.0 for row in read_jsonl(path) if not row.get("infra_error")}


def table(columns: list[dict[str, bool]]) -> list[tuple[str, list[tuple[int, int]]]]:
    """(unit, [(solved, tasks) per column]), units with most solved first."""
    units: dict[str, list[list[int]]] = defaultdict(lambda: [[0, 0] for _ in columns])
    for c, column in enumerate(columns):
        for task_id, solved in column.items():
            cell = units[unit_of(task_id)][c]
            cell[0], cell[1] = cell[0] + int(solved), cell[1] + 1
    rows = [(unit, [tuple(cell) for cell in cells]) for unit, cells in units.items()]
    return sorted(rows, key=lambda row: (-sum(s for s, _ in row[1]), row[0]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="evaluation folders (rlyard eval --trajectories)")
    parser.add_argument("--paired", nargs=2, type=int, metavar=("A", "B"), help="list the tasks column B fixed and A did not, and the reverse")
    args = parser.parse_args(argv)
    columns = [outcomes(folder) for folder in args.folders]
    names = [folder.name.removeprefix("episodes_") for folder in args.folders]
    print("unit".ljust(44) + "".join(name[:14].rjust(15) for name in names))
    for unit, cells in table(columns):
        print(unit[:43].ljust(44) + "".join(f"{s}/{n}".rjust(15) for s, n in cells))
    print("all".ljust(44) + "".join(f"{sum(c.values())}/{len(c)}".rjust(15) for c in columns))
    if args.paired:
        a, b = (columns[i - 1] for i in args.paired)
        gained = sorted(t for t in a.keys() & b.keys() if b[t] and not a[t])
        lost = sorted(t for t in a.keys() & b.keys() if a[t] and not b[t])
        print(f"\n{names[args.paired[1] - 1]} fixed {len(gained)} that {names[args.paired[0] - 1]} did not; lost {len(lost)}")
        for label, tasks in (("+", gained), ("-", lost)):
            for task_id in tasks:
                print(f"  {label} {task_id}")


if __name__ == "__main__":
    main()
