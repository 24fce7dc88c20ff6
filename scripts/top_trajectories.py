"""The highest-reward trajectories of one or more run folders, printed whole, to read by hand.

    python scripts/top_trajectories.py OUT/rl_seed0 OUT/rl_seed1 OUT/rl_seed2 -n 20
    python scripts/top_trajectories.py OUT/episodes_rl_seed0 -n 10 --chars 4000

Every family's learning issue asks for RL's 20 best trajectories to be read before its figure is
reported: what they did, and whether any games the grader. `rlyard view RUN` shows one run
with filters; this prints the top of several runs at once, ties broken by fewer tokens (the
cleanest solutions first), each with its task, step, reward components, grader info and replies.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlyard.observe.store import read_jsonl, trajectories_file


def rows_of(run: Path) -> list[dict]:
    path = trajectories_file(run)
    if not path.exists():
        sys.exit(f"top_trajectories: {path} does not exist (a run folder or an `rlyard eval --trajectories` folder)")
    return [{**row, "_run": str(run)} for row in read_jsonl(path)]  # a cut last line skipped, corruption raises


def transcript(row: dict) -> str:
    """The replies with the tool output between them (the row's segments), else the completion."""
    if not row.get("segments"):
        return row.get("completion", "")
    parts = []
    for segment in row["segments"]:
        text = "".join(segment["pieces"]) if segment.get("sampled") else segment.get("text", "")
        for marker in ("<|im_start|>", "<|im_end|>"):
            text = text.replace(marker, "")
        parts.append(text.strip() if segment.get("sampled") else "  | " + text.strip().replace("\n", "\n  | "))
    return "\n".join(part for part in parts if part.strip(" |"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (or folders of rlyard eval --trajectories)")
    parser.add_argument("-n", type=int, default=20, help="how many (default 20)")
    parser.add_argument("--chars", type=int, default=2500, help="characters of each completion shown (default 2500)")
    args = parser.parse_args(argv)
    rows = [row for run in args.runs for row in rows_of(run) if not row.get("infra_error") and row.get("reward") is not None]
    rows.sort(key=lambda r: (-r["reward"], r.get("num_tokens") or 0))
    rewards = [r["reward"] for r in rows]
    print(f"{len(rows)} graded trajectories; reward >= 1: {sum(x >= 1 for x in rewards)}; showing the top {min(args.n, len(rows))}")
    for rank, row in enumerate(rows[: args.n], 1):
        info = {k: v for k, v in (row.get("info") or {}).items() if not isinstance(v, str) or len(v) < 300}
        print(f"\n===== #{rank} reward {row['reward']:.3f}  {row['_run']} step {row.get('step')}  task {row.get('task_id')}  "
              f"turns {row.get('turns')}  tokens {row.get('num_tokens')}")
        print(f"components {json.dumps(row.get('components'), sort_keys=True)}")
        task = (row.get("prompt") or "").rsplit("<|im_start|>user", 1)[-1].replace("<|im_end|>", "").replace("<|im_start|>assistant", "")
        print(f"task: {' '.join(task.split())[:400]}")
        if info:
            print(f"info {json.dumps(info, sort_keys=True)[:600]}")
        print(transcript(row)[: args.chars])
    return 0


if __name__ == "__main__":
    sys.exit(main())
