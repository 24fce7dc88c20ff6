"""Pages graded per second by the webdev grader: one browser reused across pages (as graders run)
against a fresh browser for every page.

    python bench/webdev_render.py                         # 3 repeats of the 24 reference sites
    python bench/webdev_render.py --repeats 5 --json /tmp/webdev_render.json
    python bench/webdev_render.py --pages 8 --repeats 3          # a quicker look

Each repeat grades every built-in task's reference site once per mode with the whole grader
(`grade_dist`: node --check, both viewports, the DOM checks, the screenshot, SSIM); the modes
alternate which goes first from one repeat to the next, so a change of machine load hits both.
"Fresh" closes the browser before each page (Playwright's driver stays up), so it pays one
Chromium start per page. Pages are graded one after another (one grader; RLYARD_WEBDEV_BROWSERS
does not matter: one page at a time keeps one worker busy, and a restart hits every worker). Reported per mode: pages per second, mean and standard deviation over
the repeats, and the load average, since the figure depends on what else the machine runs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provenance import commit  # noqa: E402  (bench/ is on sys.path when a script runs)

from rlyard.envs.webdev.render import WORKERS, renderer  # noqa: E402
from rlyard.envs.webdev.tasks import make_tasks  # noqa: E402
from rlyard.envs.webdev.verify import grade_dist  # noqa: E402


def one_pass(tasks, fresh: bool, shots: str) -> float:
    started = time.perf_counter()
    for task in tasks:
        if fresh:
            WORKERS.each(lambda: renderer().restart())
        reward = grade_dist(Path(task.payload["site"]), {**task.payload, "screenshot_dir": shots}, task.id)
        if reward.infra_error or reward.value < 0.9:
            raise SystemExit(f"{task.id}: the reference scored {reward.value}: {reward.info}")
    return len(tasks) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pages", type=int, default=None, help="only the first N tasks' sites (default: all 24)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    tasks = make_tasks("eval", 10**9, 0, eval_percent=100)[: args.pages]
    shots = "/tmp/rlyard-webdev-bench-shots"
    one_pass(tasks[:2], False, shots)  # warm-up: the first browser start, imports, the page cache
    rates: dict[str, list[float]] = {"reused": [], "fresh": []}
    loads = []
    for repeat in range(args.repeats):
        for mode in (("reused", "fresh") if repeat % 2 == 0 else ("fresh", "reused")):
            rates[mode].append(one_pass(tasks, mode == "fresh", shots))
            loads.append(os.getloadavg()[0])
            print(f"[bench] repeat {repeat + 1} {mode:<6} {rates[mode][-1]:.2f} pages/s", flush=True)
    WORKERS.close()
    result = {"command": " ".join(["python", "bench/webdev_render.py", *sys.argv[1:]]), "commit": commit(),
              "cpus": os.cpu_count(), "load_average_mean": statistics.mean(loads), "pages": len(tasks), "repeats": args.repeats}
    for mode, values in rates.items():
        result[f"{mode}_pages_per_s_mean"] = statistics.mean(values)
        result[f"{mode}_pages_per_s_sd"] = statistics.stdev(values) if len(values) > 1 else 0.0
        result[f"{mode}_pages_per_s"] = values
    result["speedup"] = result["reused_pages_per_s_mean"] / result["fresh_pages_per_s_mean"]
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
