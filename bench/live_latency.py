"""Request latency of `rlyard serve --learn` while the learner trains and swaps weights, against
serving alone, as ratios from one run.

One server, the same client load in both phases: --clients threads, each sending lone session
requests (an arith prompt, --max-tokens tokens, temperature 1) back to back for --seconds.
Phase 1 (serving alone): no reward is posted, the learner is idle. Phase 2 (serving + learning):
every finished session's reward is posted at once (by two poster threads, so the clients' request
loops are the same in both phases), so the learner trains a step whenever
`live.sessions_per_step` rewards are in and pushes its weights between two engine calls.
Latency is the client's wall time per request (p50 / p99); the ratio is phase 2 over phase 1.
The reward posts' own latency (journal write and fsync included) is reported too.

    nice -n 10 python bench/live_latency.py --model tiny --out bench/results/live_latency.json
    nice -n 10 python bench/live_latency.py --model embedded --seconds 120
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from queue import Queue

import httpx
import torch
from openai import OpenAI

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from provenance import commit  # noqa: E402

from rlyard.config import load_config  # noqa: E402
from rlyard.envs import get_family  # noqa: E402
from rlyard.envs.arith.verify import verify  # noqa: E402
from rlyard.live.service import LiveService  # noqa: E402
from rlyard.models import load_tokenizer  # noqa: E402
from rlyard.testing.tiny import save_tiny_llama  # noqa: E402

KEY = "bench-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def phase(url: str, tasks, clients: int, seconds: float, max_tokens: int, learn: bool, tag: str,
          posts: list[float] | None = None) -> list[float]:
    """Latencies of every request the clients finish within `seconds`. With `learn`, each finished
    session's reward goes to a queue that two poster threads post from (their latencies into
    `posts`), so the clients send requests exactly as in the phase without learning."""
    latencies: list[float] = []
    lock, deadline, queue = threading.Lock(), time.monotonic() + seconds, Queue()

    def client(k: int) -> None:
        http = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=3600)
        i = 0
        while time.monotonic() < deadline:
            sid, task = f"{tag}-{k}-{i}", tasks[(k * 1000 + i) % len(tasks)]
            started = time.perf_counter()
            reply = http.with_options(base_url=f"{url}/sessions/{sid}/v1").chat.completions.create(
                model="policy", messages=task.prompt, max_tokens=max_tokens, temperature=1.0)
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
            if learn:
                queue.put((sid, verify(reply.choices[0].message.content, task).value))
            i += 1

    def poster() -> None:
        while (item := queue.get()) is not None:
            started = time.perf_counter()
            httpx.post(f"{url}/v1/sessions/{item[0]}/reward", headers=AUTH, json={"reward": item[1]}, timeout=600).raise_for_status()
            with lock:
                posts.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    posters = [threading.Thread(target=poster) for _ in range(2 if learn else 0)]
    for t in threads + posters:
        t.start()
    for t in threads:
        t.join()
    for _ in posters:
        queue.put(None)
    for t in posters:
        t.join()
    return latencies


def summary(latencies: list[float]) -> dict[str, float]:
    return {"requests": len(latencies), "p50_s": round(statistics.median(latencies), 4),
            "p99_s": round(percentile(latencies, 0.99), 4), "mean_s": round(statistics.fmean(latencies), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["tiny", "embedded"], default="tiny")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--sessions-per-step", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: on a busy CPU, two spin-wait)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "live_latency.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    code, work = commit(), Path(tempfile.mkdtemp(prefix="rlyard-live-latency-"))  # the code at the start
    model = "embedded" if args.model == "embedded" else str(save_tiny_llama(work / "tiny", load_tokenizer("embedded")))
    config = load_config(ROOT / "configs" / "quickstart.yaml", [
        f"model.name={model}", "eval.size=0", f"live.sessions_per_step={args.sessions_per_step}", "train.steps=100000",
        "output.checkpoint_every=5", "output.keep_checkpoints=2", "output.plot=false", "output.progress=false"])
    tasks = get_family("arith").make_tasks("train", 500, 0, **config.env.options)
    service = LiveService(config, work / "run", KEY, port=0, model_name="policy").start()
    try:
        phase(service.url, tasks, args.clients, min(10.0, args.seconds / 4), args.max_tokens, False, "warm")
        alone = phase(service.url, tasks, args.clients, args.seconds, args.max_tokens, False, "alone")
        before = httpx.get(f"{service.url}/admin/status", headers=AUTH).json()["policy_version"]
        posts: list[float] = []
        learning = phase(service.url, tasks, args.clients, args.seconds, args.max_tokens, True, "learn", posts)
        after = httpx.get(f"{service.url}/admin/status", headers=AUTH).json()
    finally:
        service.close()
    a, b = summary(alone), summary(learning)
    result = {"commit": code, "model": args.model, "clients": args.clients, "seconds_per_phase": args.seconds,
              "max_tokens": args.max_tokens, "sessions_per_step": args.sessions_per_step, "torch_threads": args.threads,
              "serving_alone": a, "serving_while_learning": b, "reward_post": summary(posts),
              "weight_swaps_during_learning": after["policy_version"] - before, "stale_dropped": after["stale_dropped"],
              "p50_ratio": round(b["p50_s"] / a["p50_s"], 3), "p99_ratio": round(b["p99_s"] / a["p99_s"], 3),
              "load_average_at_end": os.getloadavg()[0], "niced": os.nice(0) > 0}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
