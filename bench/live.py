"""Live RL on the quickstart's task: an openai client's traffic trains the policy that serves it.

`rlyard serve --learn configs/quickstart.yaml` (in process, the embedded SmolLM2-135M, LoRA): each
round, 4 clients ask a train problem "What is x+y?" with n=8 in a session (a GRPO group of 8,
temperature 0.7, 16 tokens) and post each choice's reward from rlyard's arith verifier (a reply
cut at the token cap scores 0, as the quickstart's truncated_reward 0). The next round's requests
are sampled while the learner trains on the last one (weights swapped under traffic). Every
--probe-every versions, with no reward in flight (the version is fixed), the held-out success is
probed through the same server: greedy, 32 tokens, --probe-size eval problems.

    nice -n 10 python bench/live.py --steps 20 --probe-every 4 --out bench/results/live.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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

KEY = "bench-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
GROUPS, N = 4, 8  # the quickstart's prompts_per_step x n


def status(url: str) -> dict:
    return httpx.get(f"{url}/admin/status", headers=AUTH, timeout=120).json()


def wait_version(url: str, version: int) -> dict:
    while True:
        now = status(url)
        if now["learner_error"]:
            raise RuntimeError(now["learner_error"])
        if now["policy_version"] >= version:
            return now
        time.sleep(0.2)


def sample_group(url: str, sid: str, task, max_tokens: int, temperature: float) -> list[tuple[str, float]]:
    client = OpenAI(base_url=f"{url}/sessions/{sid}/v1", api_key="unused", max_retries=0, timeout=3600)
    reply = client.chat.completions.create(model="policy", messages=task.prompt, n=N, max_tokens=max_tokens,
                                           temperature=temperature)
    return [(f"{sid}.{i}", 0.0 if c.finish_reason == "length" else verify(c.message.content, task).value)
            for i, c in enumerate(reply.choices)]


def probe(url: str, tasks, pool: ThreadPoolExecutor) -> float:
    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=3600)

    def one(task) -> float:
        reply = client.chat.completions.create(model="policy", messages=task.prompt, max_tokens=32, temperature=0)
        return verify(reply.choices[0].message.content, task).value

    return sum(pool.map(one, tasks)) / len(tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--probe-every", type=int, default=4)
    parser.add_argument("--probe-size", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: on a busy CPU, two spin-wait)")
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "live.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(ROOT / "configs" / "quickstart.yaml", [
        f"train.steps={args.steps}", "eval.size=0", f"live.sessions_per_step={GROUPS * N}", "output.checkpoint_every=5",
        "output.keep_checkpoints=3", "output.plot=false", "output.progress=false"])
    options = config.env.options
    train = get_family("arith").make_tasks("train", GROUPS * (args.steps + 1), config.env.seed, **options)
    held_out = get_family("arith").make_tasks("eval", args.probe_size, config.env.seed, **options)
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="rlyard-live-"))
    started, code = time.perf_counter(), commit()  # the code at the start (others may commit meanwhile)
    service = LiveService(config, run_dir, KEY, port=0, model_name="policy").start()
    url, versions, posted = service.url, [], 0
    pool = ThreadPoolExecutor(max_workers=16)
    rollout = config.rollout

    def sample_round(r: int) -> list[tuple[str, float]]:
        futures = [pool.submit(sample_group, url, f"r{r}-{k}", train[r * GROUPS + k], rollout.max_new_tokens, rollout.temperature)
                   for k in range(GROUPS)]
        return [row for f in futures for row in f.result()]

    try:
        versions.append({"version": 0, "success": probe(url, held_out, pool), "sessions": 0})
        print(f"[live bench] version 0: held-out {versions[-1]['success']:.1%}", flush=True)
        sampling = pool.submit(sample_round, 0)
        rewards_by_step = []
        for r in range(args.steps):
            rewards = sampling.result()
            for sid, reward in rewards:
                answer = httpx.post(f"{url}/v1/sessions/{sid}/reward", headers=AUTH, json={"reward": reward}, timeout=120)
                answer.raise_for_status()
                posted += 1
            rewards_by_step.append(sum(r for _, r in rewards) / len(rewards))
            sampling = pool.submit(sample_round, r + 1) if r + 1 < args.steps else None  # overlaps the update
            now = wait_version(url, r + 1)
            print(f"[live bench] version {r + 1}: train reward {rewards_by_step[-1]:.3f}, {time.perf_counter() - started:.0f} s",
                  flush=True)
            if (r + 1) % args.probe_every == 0 or r + 1 == args.steps:
                versions.append({"version": r + 1, "success": probe(url, held_out, pool), "sessions": now["trained_sessions"]})
                print(f"[live bench] version {r + 1}: held-out {versions[-1]['success']:.1%}", flush=True)
                write(args, config, code, versions, posted, status(url), rewards_by_step, started, r + 1 < args.steps)
    finally:
        service.close()
        pool.shutdown(wait=False, cancel_futures=True)


def write(args, config, code: str, versions: list[dict], posted: int, final: dict, rewards_by_step: list[float], started: float,
          partial: bool) -> None:
    """The result file, rewritten after every probe (`partial` until the last one)."""
    result = {"partial": partial, "commit": code, "config": "configs/quickstart.yaml", "model": config.model.name,
              "steps": args.steps, "sessions_per_step": GROUPS * N, "probe_size": args.probe_size,
              "probe": "greedy, 32 tokens, held-out arith problems, through the same server", "versions": versions,
              "rewards_posted": posted, "rewards_journaled": final["rewards_posted"], "stale_dropped": final["stale_dropped"],
              "trained_sessions": final["trained_sessions"], "train_reward_by_step": [round(x, 4) for x in rewards_by_step],
              "seconds": round(time.perf_counter() - started, 1), "torch_threads": args.threads,
              "load_average_at_end": os.getloadavg()[0], "niced": os.nice(0) > 0}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    if not partial:
        print(json.dumps({k: result[k] for k in ("versions", "rewards_posted", "stale_dropped", "seconds")}))


if __name__ == "__main__":
    main()
