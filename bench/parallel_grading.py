"""Grading a rollout's episodes one after another, or one per core (what `run_episodes` does).

    python bench/parallel_grading.py                                   # 16 code episodes, 3 repeats
    python bench/parallel_grading.py --episodes 16 --repeats 3 --json bench/results/parallel_grading.json

Each repeat plays `--episodes` generated code tasks (train split) through the environment's own
tools, half with the oracle's fix and half submitted untouched, then grades them all (`score`:
the hidden tests in a fresh sandbox, then `close`) serially and, on a second identical set, in a
pool of one thread per core. Serial and pooled alternate; the figure is the ratio of their wall
times per repeat. Graders are not trained: the episodes are the oracle's, not a model's.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provenance import command_line, commit  # noqa: E402  (bench/ is on sys.path when a script runs)

from rlyard.envs.code.env import CodeEnv  # noqa: E402
from rlyard.envs.code.gen_oracle import oracle  # noqa: E402
from rlyard.envs.code.tasks import make_tasks  # noqa: E402


def played(tasks) -> list[tuple[CodeEnv, float]]:
    """Each task's environment after its episode, and the reward it must get (1 fixed, 0 untouched)."""
    envs = []
    for k, task in enumerate(tasks):
        env = CodeEnv()
        env.reset(task)
        replies = oracle(task, random.Random(k))
        for reply in (replies if k % 2 == 0 else replies[-1:]):
            if env.step(reply).done:
                break
        envs.append((env, 1.0 if k % 2 == 0 else 0.0))
    return envs


def grade(env_expected: tuple[CodeEnv, float]) -> None:
    env, expected = env_expected
    value = env.score().value
    env.close()
    if value != expected:
        raise SystemExit(f"an episode scored {value}, expected {expected}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=16, help="episodes graded per mode and repeat (a 4 x 4 RL step: 16)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    tasks = make_tasks("train", args.episodes, 0, source="generated", tool_format="bash_block", arm_weights={"bash": 1})
    workers = os.cpu_count() or 1
    serial, pooled = [], []
    for repeat in range(args.repeats):
        for mode in ("serial", "pooled"):
            envs = played(tasks)
            started = time.perf_counter()
            if mode == "serial":
                for pair in envs:
                    grade(pair)
            else:
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    list(pool.map(grade, envs))
            (serial if mode == "serial" else pooled).append(time.perf_counter() - started)
        print(f"[bench] repeat {repeat + 1}: serial {serial[-1]:.2f} s, {workers} threads {pooled[-1]:.2f} s, "
              f"{serial[-1] / pooled[-1]:.2f}x", flush=True)
    ratios = [s / p for s, p in zip(serial, pooled)]
    result = {
        "command": command_line(["python", "bench/parallel_grading.py", *sys.argv[1:]]), "commit": commit(),
        "cpus": workers, "load_average_at_end": os.getloadavg()[0], "episodes": args.episodes, "repeats": args.repeats,
        "serial_s": serial, "pooled_s": pooled, "speedup": ratios,
        "speedup_mean": statistics.mean(ratios), "speedup_sd": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
    }
    print(f"[bench] {args.episodes} episodes: serial {statistics.mean(serial):.2f} s, pooled {statistics.mean(pooled):.2f} s: "
          f"{result['speedup_mean']:.2f}x (sd {result['speedup_sd']:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
