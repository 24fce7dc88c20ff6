"""What the Ray backend costs on one machine: the same run with `orchestrate.backend=local` and
`=ray`, side by side, alternating.

    python bench/ray_overhead.py                                   # quickstart, 6 steps, 2 repeats each way
    python bench/ray_overhead.py --repeats 3 --json bench/results/ray_overhead.json

Each run is `rlyard.orchestrate.entry.train` in a fresh process (the embedded SmolLM2-135M on
configs/quickstart.yaml unless `--config` / overrides say otherwise), so the Ray side pays for
starting its private local cluster and actors every time, as `rlyard train` does. Reported per
run: wall seconds (process start to result), the seconds outside the training steps (start-up:
cluster, actors, model loads; the base and final evaluations), the first step and the median of
the later steps (`time/step` in metrics.jsonl). On one machine Ray can only cost: the learner, the rollout
actor and the grader are other processes on the same cores, weights cross the object store and
every environment call crosses a socket. What it buys is placement on other machines.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing it
from provenance import commit  # noqa: E402  (bench/ is on sys.path when a script runs)
from rlyard.observe.metrics import read_metrics  # noqa: E402

ONE_RUN = """
import json, sys, time
started = time.perf_counter()
from pathlib import Path
from rlyard.config import load_config
from rlyard.orchestrate.entry import train
config = load_config(sys.argv[1], sys.argv[3:])
result = train(config, Path(sys.argv[2]))
print("RESULT", json.dumps({"wall_s": time.perf_counter() - started, "final_accuracy": result.final_accuracy}))
"""


def one_run(backend: str, args, run_dir: Path) -> dict:
    overrides = [f"orchestrate.backend={backend}", f"train.steps={args.steps}", "output.progress=false", "output.plot=false",
                 f"output.run_dir={run_dir}", f"train.threads={args.threads}", *args.overrides]
    if backend == "ray":
        overrides += [f"orchestrate.ray.{key}" for key in args.ray]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.time()
    out = subprocess.run([sys.executable, "-c", ONE_RUN, args.config, str(run_dir), *overrides], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"{backend} run failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
    metrics = read_metrics(run_dir / "metrics.jsonl")
    steps = [m for m in metrics if "time/step" in m]
    step_times = [m["time/step"] for m in steps]
    later = step_times[1:] or step_times
    train_s = sum(step_times)
    return {"backend": backend, "wall_s": result["wall_s"], "train_s": train_s, "outside_steps_s": result["wall_s"] - train_s,
            "first_step_s": step_times[0], "median_later_step_s": statistics.median(later),
            "final_accuracy": result["final_accuracy"], "started_at": started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/quickstart.yaml")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="train.threads of the run (and of each actor)")
    parser.add_argument("--ray", nargs="*", default=["rollout_workers=1", "graders=1"], help="orchestrate.ray.* for the ray side")
    parser.add_argument("--json", help="write every run and the summary here")
    parser.add_argument("overrides", nargs="*", default=["eval.size=20"], help="dotted overrides for both sides")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for backend in ("local", "ray"):
                run = one_run(backend, args, Path(tmp) / f"{backend}-{repeat}")
                run["repeat"], run["load_average"] = repeat, os.getloadavg()[0]
                runs.append(run)
                print(f"[bench] {backend:5s} repeat {repeat}: wall {run['wall_s']:.1f} s, outside the steps "
                      f"{run['outside_steps_s']:.1f} s, first step {run['first_step_s']:.2f} s, later steps (median) "
                      f"{run['median_later_step_s']:.2f} s, load {run['load_average']:.1f}", flush=True)

    def summary(key: str) -> dict:
        ratios = [r[key] / l[key] for l, r in zip(runs[0::2], runs[1::2])]
        return {"ray_over_local_mean": statistics.fmean(ratios), "ray_over_local_sd": statistics.pstdev(ratios), "ratios": ratios}

    result = {"command": " ".join(["python", "bench/ray_overhead.py", *sys.argv[1:]]), "commit": commit(),
              "config": args.config, "steps": args.steps, "threads": args.threads, "ray": args.ray, "overrides": args.overrides,
              "cpus": os.cpu_count(), "runs": runs,
              "summary": {key: summary(key) for key in ("wall_s", "outside_steps_s", "median_later_step_s")}}
    for key, value in result["summary"].items():
        print(f"[bench] {key}: ray / local = {value['ray_over_local_mean']:.2f} (sd {value['ray_over_local_sd']:.2f}) "
              f"over {len(value['ratios'])} pairs")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
