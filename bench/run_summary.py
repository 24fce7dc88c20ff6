"""Summarise a finished run folder as a committed result file: the command, the code version,
every step's metrics that matter, and how its trajectories ended.

    python bench/run_summary.py RUN_DIR --command "rlyard train configs/general.yaml train.steps=2" \
        --commit d1321f7 --note "..." --json bench/results/general_train_embedded.json
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
from rlyard.observe.metrics import read_metrics  # noqa: E402

KEEP = ("step", "reward/mean", "reward/std", "eval/accuracy", "eval/mean_reward", "rollout/turns", "rollout/infra_errors",
        "rollout/tokens_mean", "time/step", "time/generate", "loss/policy")


def summarise(run_dir: Path) -> dict:
    metrics = read_metrics(run_dir / "metrics.jsonl")
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    finishes = collections.Counter(row["finish_reason"] for row in rows)
    components = collections.defaultdict(list)
    for row in rows:
        for key, value in row["components"].items():
            components[key].append(value)
    return {
        "metrics": [{k: v for k, v in m.items() if k in KEEP or k.startswith("reward/")} for m in metrics],
        "trajectories": len(rows),
        "rewards": [row["reward"] for row in rows],
        "finish_reasons": dict(finishes),
        "infra_errors": sum(row["infra_error"] for row in rows),
        "component_means": {k: sum(v) / len(v) for k, v in sorted(components.items())},
        "screenshots": len(list((run_dir / "screenshots").glob("*.png"))) if (run_dir / "screenshots").is_dir() else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--command", required=True, help="the command that made the run")
    parser.add_argument("--commit", required=True, help="the code version it ran")
    parser.add_argument("--note", default="", help="what to know when reading the figures (load, cut settings)")
    parser.add_argument("--log", type=Path, help="the run's console log: its [rlyard] lines are kept")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    result = {"command": args.command, "commit": args.commit, "note": args.note,
              "machine": f"{os.cpu_count()} CPU cores, no GPU", **summarise(args.run_dir)}
    if args.log:
        text = args.log.read_text(errors="replace").replace("\r", "\n")
        result["log"] = [line.strip() for line in text.splitlines() if line.strip().startswith("[rlyard]")]
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}: {result['trajectories']} trajectories, finish reasons {result['finish_reasons']}")


if __name__ == "__main__":
    main()
