"""How long the cyber grader takes: per PoC, and `rlyard envs validate cyber` for the whole set.

    python bench/cyber_grading.py                                       # 3 gradings of every reference PoC
    python bench/cyber_grading.py --repeats 5 --json bench/results/cyber_grading.json

Per target: the pristine build once (sandboxed gcc with ASan + UBSan, cached for the process, as
in training), then `--repeats` gradings of its reference PoC (`grade_bytes`: a fresh folder, a
fresh sandbox, the run, the report parsed). Reported: the median grading time per PoC over all
gradings, its spread, the build times, and the wall time of the whole validate (every target:
build, PoC, seed, empty input, the oracle through the tools), run in a fresh process as the CLI
runs it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provenance import commit  # noqa: E402  (bench/ is on sys.path when a script runs)

from rlyard.envs.cyber.verify import grade_bytes, pristine_build  # noqa: E402
from rlyard.envs.cyber.targets import builtin_targets  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    per_target, gradings, builds = {}, [], []
    for target in builtin_targets():
        started = time.perf_counter()
        pristine_build(target)
        build_s = time.perf_counter() - started
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            verdict = grade_bytes(target, Path(target.poc).read_bytes())
            times.append(time.perf_counter() - started)
            if verdict.reward.value != 1.0:
                raise SystemExit(f"{target.id}: the reference PoC scored {verdict.reward.value}: {verdict.reward.info}")
        per_target[target.id] = {"build_s": build_s, "grade_s": times}
        gradings += times
        builds.append(build_s)
        print(f"[bench] {target.id:<16} build {build_s:.2f} s, grading median {statistics.median(times):.3f} s", flush=True)
    started = time.perf_counter()
    validate = subprocess.run([sys.executable, "-m", "rlyard.cli", "envs", "validate", "cyber"], capture_output=True, text=True)
    validate_s = time.perf_counter() - started
    summary = validate.stdout.strip().splitlines()[-1] if validate.stdout.strip() else validate.stderr[-500:]
    result = {
        "command": " ".join(["python", "bench/cyber_grading.py", *sys.argv[1:]]), "commit": commit(), "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0], "targets": len(per_target), "repeats": args.repeats,
        "grade_s_median": statistics.median(gradings), "grade_s_min": min(gradings), "grade_s_max": max(gradings),
        "build_s_median": statistics.median(builds), "validate_s": validate_s, "validate_exit": validate.returncode,
        "validate_summary": summary, "per_target": per_target,
    }
    print(f"[bench] grading a PoC: median {result['grade_s_median']:.3f} s (min {result['grade_s_min']:.3f}, max "
          f"{result['grade_s_max']:.3f}) over {len(gradings)} gradings of {len(per_target)} targets; build median "
          f"{result['build_s_median']:.2f} s; rlyard envs validate cyber: {validate_s:.1f} s ({summary})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
