"""`rlyard view` on a synthetic 100,000-trajectory run folder: index build time and memory, then
the time of every API route and of each page in headless chromium.

    python bench/viewer_index.py --trajectories 100000 --json bench/results/viewer_index.json

Rows look like a multi-turn `files` run's: a 1.2 kB prompt, two sampled turns of 60 tokens
with per-token pieces and logprobs, a tool output, reward components and grader info; 100
trajectories (50 groups of 2) per step. The index is built twice: in this process, under
tracemalloc (Python's peak allocations) and getrusage (the process's peak RSS), and again by
the real `rlyard view` subprocess, which then serves the timed requests (it finds the index
complete, so its start is only the catch-up check).
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from provenance import commit  # noqa: E402  (bench/ is on sys.path when a script runs)

from rlyard.observe.viewer.index import TrajectoryIndex  # noqa: E402
from rlyard.testing.loopback import read_until  # noqa: E402

PROMPT = ("<|im_start|>system\nYou are an agent working in a folder of files. Tools: bash, grep, read_file, glob, submit. "
          + "Call a tool with <tool_call>{...}</tool_call>. " * 20 + "<|im_end|>\n<|im_start|>user\n"
          "What is the serial number of the device named {device}?<|im_end|>\n<|im_start|>assistant\n")
WORDS = "the device serial file search grep inventory submit answer folder look coral amber pump sensor meter".split()
FINISH = ["done", "no_tool_call", "turn_token_limit", "length"]
PER_STEP, GROUP = 100, 2
TIMED_ROUTES = ["/", "/static/app.js", "/api/overview", "/api/metrics", "/api/steps", "/api/groups?step={mid_step}",
                "/api/trajectories", "/api/trajectories?reward_max=0", "/api/trajectories?finish=done&step_min={mid_step}",
                "/api/trajectories?q=coral-sensor-7", "/api/trajectories?offset=90000", "/api/trajectory/{mid_id}"]
PAGES = [("overview", "#/", ".chart path.line"), ("failed list", "#/list?reward_max=0", "#trajectories"),
         ("search", "#/list?q=amber", "#trajectories"), ("trajectory", "#/t/{mid_id}", "article.trajectory"),
         ("compare", "#/compare/{mid_id}/{next_id}", ".compare article.trajectory")]


def synthetic_row(rng: random.Random, i: int) -> dict:
    group = random.Random(i // GROUP)  # a group's members share their task
    device = f"{group.choice(WORDS[11:])}-{group.choice(WORDS[13:])}-{i // GROUP % 97}"
    turns = [[rng.choice(WORDS) + " " for _ in range(60)] for _ in range(2)]
    reward = rng.choice([0.0, 0.0, 0.0, 1.0])
    return {
        "task_id": f"files-train-{device}", "group_id": f"{i // PER_STEP}/{(i % PER_STEP) // GROUP}:files-train-{device}",
        "prompt": PROMPT.replace("{device}", device), "completion": "".join(turns[0] + turns[1]), "num_tokens": 120,
        "reward": reward, "components": {"correct": reward, "submitted": 1.0, "tool_calls": 1.0},
        "finish_reason": rng.choice(FINISH), "infra_error": rng.random() < 0.01, "turns": 2, "policy_versions": [i // PER_STEP],
        "info": {"submitted": f"SN-{rng.randrange(10**6):06d}", "expected": f"SN-{rng.randrange(10**6):06d}"},
        "segments": [
            {"sampled": True, "pieces": turns[0], "logprobs": [round(-rng.expovariate(2), 3) for _ in turns[0]]},
            {"sampled": False, "text": f"\n<|im_start|>user\n<tool_response>\ninventory/{device}.txt: serial SN-1\n</tool_response>"},
            {"sampled": True, "pieces": turns[1], "logprobs": [round(-rng.expovariate(2), 3) for _ in turns[1]]},
        ],
        "step": i // PER_STEP + 1,
    }


def write_run(run_dir: Path, n: int) -> None:
    rng = random.Random(0)
    run_dir.mkdir(parents=True, exist_ok=True)
    steps = (n + PER_STEP - 1) // PER_STEP
    (run_dir / "config.yaml").write_text(f"name: bench\nmodel: {{name: embedded}}\nenv: {{name: files}}\nalgo: {{name: grpo}}\n"
                                         f"train: {{steps: {steps}}}\n")
    with open(run_dir / "metrics.jsonl", "w") as f:
        for step in range(1, steps + 1):
            f.write(json.dumps({"step": step, "reward/mean": rng.random(), "reward/pass_rate": rng.random(), "loss/kl": rng.random() / 100,
                                "loss/entropy": 1 + rng.random(), "loss/clip_fraction": rng.random() / 10,
                                "rollout/response_tokens": 100 + rng.random() * 20, "time/step": 5 + rng.random()}) + "\n")
    with open(run_dir / "trajectories.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps(synthetic_row(rng, i), ensure_ascii=False) + "\n")


def build_index(run_dir: Path) -> dict:
    tracemalloc.start()
    started, cpu_started = time.perf_counter(), time.process_time()
    index = TrajectoryIndex(run_dir / "trajectories.jsonl", run_dir / "bench_index.sqlite", "files")
    rows = index.update()
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    index.close()
    return {"rows": rows, "build_s": round(seconds, 2), "build_cpu_s": round(cpu_seconds, 2), "python_peak_mib": round(peak / 2**20, 1),
            "index_mib": round((run_dir / "bench_index.sqlite").stat().st_size / 2**20, 1)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(run_dir: Path, port: int) -> tuple[subprocess.Popen, float]:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rlyard.cli", "view", str(run_dir), "--port", str(port), "--index",
                             str(run_dir / "bench_index.sqlite")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    printed = read_until(proc, "http://")
    if "http://" not in printed:
        raise SystemExit(f"rlyard view exited:\n{printed}")
    for _ in range(100):  # uvicorn prints nothing at log level warning: wait until it answers
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/steps", timeout=5).read()
            break
        except OSError:
            time.sleep(0.1)
    return proc, time.perf_counter() - started


def time_routes(base: str, names: dict) -> dict:
    times = {}
    for route in TIMED_ROUTES:
        path = route.format(**names)
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            with urllib.request.urlopen(base + path, timeout=30) as response:
                size = len(response.read())
            best = min(best, time.perf_counter() - started)
        times[path] = {"ms": round(best * 1000, 1), "bytes": size}
    return times


def time_pages(base: str, names: dict) -> dict:
    from playwright.sync_api import sync_playwright

    times = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(base + "/#/")
        page.wait_for_selector(".chart", state="attached")
        for name, hash_, selector in PAGES:
            best = float("inf")
            for _ in range(3):  # the best of three, as for the routes: the page itself, not a busy machine's hiccup
                page.goto("about:blank")
                started = time.perf_counter()
                page.goto(base + "/" + hash_.format(**names))
                page.wait_for_selector(selector, state="attached")
                best = min(best, time.perf_counter() - started)
            times[name] = round(best * 1000, 1)
        browser.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=100_000)
    parser.add_argument("--folder", help="where to write the synthetic run, kept and reused by the next run with the same "
                                         "--folder (default: a temp folder, removed after)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(args.folder or tmp) / "bench-run"
        started = time.perf_counter()
        if not (run_dir / "trajectories.jsonl").exists():  # a kept --folder is reused as it is
            write_run(run_dir, args.trajectories)
        (run_dir / "bench_index.sqlite").unlink(missing_ok=True)
        written = {"write_s": round(time.perf_counter() - started, 1),
                   "jsonl_mib": round((run_dir / "trajectories.jsonl").stat().st_size / 2**20, 1)}
        print(f"run folder: {args.trajectories} rows, {written['jsonl_mib']} MiB, written in {written['write_s']} s")
        index = build_index(run_dir)
        index["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(f"index: {index['rows']} rows in {index['build_s']} s ({index['build_cpu_s']} s of CPU), Python peak {index['python_peak_mib']} MiB, "
              f"process peak RSS {index['peak_rss_mib']} MiB, index file {index['index_mib']} MiB")
        mid_id = args.trajectories // 2
        names = {"mid_step": args.trajectories // PER_STEP // 2, "mid_id": mid_id, "next_id": mid_id + 1}
        port = free_port()
        proc, start_s = serve(run_dir, port)
        try:
            base = f"http://127.0.0.1:{port}"
            routes, pages = time_routes(base, names), time_pages(base, names)
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"rlyard view start (index already built): {start_s:.1f} s")
    print(f"{'route':<52} {'ms':>8} {'bytes':>9}")
    for path, t in routes.items():
        print(f"{path:<52} {t['ms']:>8} {t['bytes']:>9}")
    print(f"{'page (chromium, navigation to content drawn, best of 3)':<52} {'ms':>8}")
    for name, ms in pages.items():
        print(f"{name:<52} {ms:>8}")
    slowest = max([t["ms"] for t in routes.values()] + list(pages.values()))
    print(f"slowest: {slowest} ms ({'under' if slowest < 1000 else 'OVER'} a second)")
    if args.json:
        result = {"commit": commit(), "trajectories": args.trajectories, **written, "index": index,
                  "view_start_s": round(start_s, 2), "routes_ms": routes, "pages_ms": pages}
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    sys.exit(0 if slowest < 1000 else 1)


if __name__ == "__main__":
    main()
