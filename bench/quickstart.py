"""The README's quickstart figures, as a result file: `rlyard train` on configs/quickstart.yaml.

    python bench/quickstart.py --json bench/results/quickstart.json
    python bench/quickstart.py --set train.steps=5 eval.size=20      # a quick look

Runs the quickstart exactly as `rlyard train` does (the same config loader and `train`), in a
temporary run folder, and records what the README quotes: held-out greedy accuracy before and
after, training seconds, seconds per step, the mean training reward by block of 10 steps, plus
the commit, the load average before and after, and the thread count.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rlyard.config import load_config
from rlyard.observe.metrics import read_metrics
from rlyard.orchestrate.entry import train
from provenance import commit  # bench/ is on sys.path when a script runs

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml"



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides (none for the README's figures)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    config = load_config(str(CONFIG), ["output.plot=false", *args.set])
    with tempfile.TemporaryDirectory(prefix="rlyard-quickstart-bench-") as tmp:
        started = time.perf_counter()
        result = train(config, Path(tmp) / "run")
        wall = time.perf_counter() - started
        metrics = read_metrics(Path(tmp) / "run" / "metrics.jsonl")
    steps = [m for m in metrics if "time/step" in m]
    rewards = [m["reward/mean"] for m in steps]
    blocks = {f"{i + 1}-{min(i + 10, len(rewards))}": statistics.fmean(rewards[i:i + 10]) for i in range(0, len(rewards), 10)}
    out = {
        "command": "python bench/quickstart.py " + " ".join(sys.argv[1:]).replace(str(args.json), args.json.name if args.json else ""),
        "commit": commit(), "overrides": args.set, "threads": config.train.threads,
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "base_accuracy": result.base_accuracy, "final_accuracy": result.final_accuracy,
        "train_seconds": result.train_seconds, "wall_seconds": wall,
        "step_seconds_mean": statistics.fmean(m["time/step"] for m in steps), "steps": len(steps),
        "reward_by_block": blocks,
    }
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
