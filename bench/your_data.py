"""The your-data example's figures over seeds: examples/your-data/config.yaml as `rlyard train` runs it.

    python bench/your_data.py --seeds 0 1 2 --json bench/results/your_data.json
    python bench/your_data.py --seeds 0 --set train.steps=4        # a quick look

Per seed (`train.seed` and `env.seed`): held-out greedy accuracy and mean reward before and
after, the training reward of each function (`reward/correct`, `reward/boxed`) over the first
and the last five steps, and the training time; then the mean and spread over seeds. Every run
is kept in the file, with the commit and the load average.
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

from provenance import commit  # bench/ is on sys.path when a script runs
from rlyard.config import load_config
from rlyard.observe.metrics import read_metrics
from rlyard.orchestrate.setup import run_family
from rlyard.orchestrate.entry import train

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "examples" / "your-data" / "config.yaml"


def one_seed(seed: int, overrides: list[str]) -> dict:
    os.chdir(REPO)  # the example's paths are relative to the checkout, as the docs run it
    config = load_config(str(CONFIG), ["output.plot=false", "output.progress=false", f"train.seed={seed}", f"env.seed={seed}",
                                       *overrides])
    with tempfile.TemporaryDirectory(prefix="rlyard-your-data-bench-") as tmp:
        started = time.perf_counter()
        result = train(config, Path(tmp) / "run")
        wall = time.perf_counter() - started
        metrics = read_metrics(Path(tmp) / "run" / "metrics.jsonl")
    steps = [m for m in metrics if "time/step" in m]
    evals = [m for m in metrics if "eval/mean_reward" in m]

    def block(key: str, part: list[dict]) -> float:
        return statistics.fmean(m.get(key, 0.0) for m in part)

    return {
        "seed": seed, "base_accuracy": result.base_accuracy, "final_accuracy": result.final_accuracy,
        "base_mean_reward": evals[0]["eval/mean_reward"], "final_mean_reward": evals[-1]["eval/mean_reward"],
        "eval_tasks": len(run_family(config).make_tasks("eval", config.eval.size, seed, **config.env.options)), "train_seconds": result.train_seconds, "wall_seconds": wall,
        "train_reward_first5": {k: block(k, steps[:5]) for k in ("reward/mean", "reward/correct", "reward/boxed")},
        "train_reward_last5": {k: block(k, steps[-5:]) for k in ("reward/mean", "reward/correct", "reward/boxed")},
    }


def spread(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs = [one_seed(seed, args.set) for seed in args.seeds]
    out = {
        "command": "python bench/your_data.py " + " ".join(sys.argv[1:]).replace(str(args.json), args.json.name if args.json else ""),
        "commit": commit(), "config": "examples/your-data/config.yaml", "overrides": args.set,
        "load_average_before": load_before, "load_average_after": os.getloadavg(), "runs": runs,
        "summary": {key: spread([run[key] for run in runs]) for key in
                    ("base_accuracy", "final_accuracy", "base_mean_reward", "final_mean_reward", "train_seconds")}
        | {f"train_{part}_{key.split('/')[1]}": spread([run[f"train_reward_{part}"][key] for run in runs])
           for part in ("first5", "last5") for key in ("reward/correct", "reward/boxed")},
    }
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
