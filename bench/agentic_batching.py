"""Agentic rollout throughput with and without the request coalescer (`rollout.coalesce`).

    python bench/agentic_batching.py                                   # 4 workers x 4 episodes, 2 repeats each way
    python bench/agentic_batching.py --repeats 3 --json bench/results/agentic_batching.json
    python bench/agentic_batching.py --config configs/agentic_quickstart.yaml --set model.init_from=runs/aq/sft \
        --background-load 2      # 3-turn episodes (the quickstart's SFT policy) next to a 2-thread matmul loop

What async mode's rollout side does, without the learner: `--workers` threads share one engine
(through `SharedEngine`, as in `orchestrate.mode=async`), and each plays `--groups` groups of
`--n` multi-turn `files` episodes (configs/files.yaml: the embedded SmolLM2-135M, up to 4 turns
of 96 tokens, temperature 0.8) through the same `rollout()` and agent loop as training, so
workers x n episodes run at once (16 by default). Off: every worker's turn is its own generate
call (today's async mode). On: the calls of all workers go through one `CoalescingEngine`.
Both settings play the same tasks with the same seeds (`sampling_for_step` of the task's
number), alternating off / on per repeat so that load drifts hit both.

Measured per run: trajectories/s and sampled tokens/s over the wall time of all groups, the
underlying engine's generate calls and the mean number of sequences per call and per decode
step (the batch size of a forward pass: a thin wrapper under the coalescer counts every decode
step's live rows through the engine's `on_step` hook), and the process's CPU seconds per
trajectory (the work, whatever share of a busy machine's cores the run got).

`--config` picks the task (default configs/files.yaml, whose base model seldom calls a tool, so
episodes are about 1 turn; configs/agentic_quickstart.yaml with its SFT run as
`model.init_from` plays 3 to 4 turns). `--background-load N` runs a separate process doing fp32
matmuls on N threads for the whole measurement: a busy machine that can be reproduced.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from rlyard.config import load_config
from rlyard.engines import CoalescingEngine
from rlyard.orchestrate.rollout import rollout
from rlyard.orchestrate.sampling import agent_limits, sampling_for_step
from rlyard.orchestrate.setup import build
from rlyard.orchestrate.workers import SharedEngine
from provenance import command_line, commit  # bench/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent


class Counting:
    """The engine, counting the rows of every generate call and of every decode step."""

    def __init__(self, engine):
        self.engine, self.lock = engine, threading.Lock()
        self.calls: list[int] = []
        self.steps: list[int] = []

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def generate(self, prompts, params, n=1, on_step=None):
        def hook(outputs):
            with self.lock:
                self.steps.append(len(outputs))
            return on_step(outputs) if on_step is not None else None

        with self.lock:
            self.calls.append(len(prompts) * n)
        return self.engine.generate(prompts, params, n, on_step=hook)

    def update_weights(self, version, state_dict=None):
        self.engine.update_weights(version, state_dict)


def measure(c, config, coalesce: bool, workers: int, groups: int, window_s: float) -> dict:
    """One run: `workers` threads, each playing `groups` groups of its own tasks."""
    if c.engine.prefix_store is not None:  # every run starts cold
        c.engine.prefix_store.clear()
    counting = Counting(c.engine)
    engine = SharedEngine(CoalescingEngine(counting, window_s=window_s) if coalesce else counting)
    tasks = c.family.make_tasks("train", workers * groups, config.env.seed, **config.env.options)
    results: list[list] = [[] for _ in range(workers)]
    errors: list[BaseException] = []

    def work(w: int) -> None:
        try:
            for seq in range(w, len(tasks), workers):
                params = sampling_for_step(config, seq, c.stop_token_ids)
                results[w] += rollout(engine, c.tokenizer, c.family, [tasks[seq]], config.rollout.n, params, f"g{seq}/",
                                      config.rollout.truncated_reward, agent_limits(config))
        except BaseException as error:  # noqa: BLE001 - raised below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(w,), name=f"bench-rollout-{w}") for w in range(workers)]
    started, cpu_started = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    if errors:
        raise errors[0]
    trajectories = [t for rs in results for t in rs]
    sampled = sum(sum(t.loss_mask) for t in trajectories)
    return {
        "coalesce": coalesce, "seconds": round(seconds, 2), "trajectories": len(trajectories),
        "trajectories_per_s": round(len(trajectories) / seconds, 4), "sampled_tokens_per_s": round(sampled / seconds, 2),
        # CPU time of this process (all threads): the work done, whatever share of the cores it got
        "cpu_seconds": round(cpu_seconds, 2), "cpu_seconds_per_trajectory": round(cpu_seconds / len(trajectories), 3),
        "generate_calls": len(counting.calls), "mean_rows_per_call": round(statistics.fmean(counting.calls), 2),
        "decode_steps": len(counting.steps), "mean_rows_per_decode_step": round(statistics.fmean(counting.steps), 2),
        "mean_turns": round(statistics.fmean(t.turns for t in trajectories), 2),
        "mean_reward": round(statistics.fmean(t.reward for t in trajectories), 3),
        "infra_errors": sum(t.infra_error for t in trajectories),
        "finish_reasons": {r: sum(t.finish_reason == r for t in trajectories) for r in sorted({t.finish_reason for t in trajectories})},
    }


def spread(values: list[float]) -> dict:
    return {"mean": round(statistics.fmean(values), 4), "sd": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0,
            "min": round(min(values), 4), "max": round(max(values), 4)}


def start_background_load(threads: int) -> subprocess.Popen | None:
    """A process multiplying 512 x 512 fp32 matrices on `threads` threads until killed."""
    if threads <= 0:
        return None
    loop = (f"import torch; torch.set_num_threads({threads}); a = torch.randn(512, 512)\n"
            "while True:\n    a = torch.tanh(a @ a)")
    return subprocess.Popen([sys.executable, "-c", loop])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--n", type=int, default=4, help="episodes per group (rollout.n)")
    parser.add_argument("--groups", type=int, default=1, help="groups each worker plays per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting (alternating off / on)")
    parser.add_argument("--window", type=float, default=0.1, help="CoalescingEngine window_s")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--set", nargs="*", default=[], help="more config overrides (dotted)")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "files.yaml", help="a files-task config (default configs/files.yaml)")
    parser.add_argument("--background-load", type=int, default=0, metavar="N",
                        help="run a process of fp32 matmuls on N threads throughout (default 0: none)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    config = load_config(args.config, [f"rollout.n={args.n}", f"train.threads={args.threads}", "eval.size=0",
                                                           "output.progress=false", *args.set])
    c = build(config, train=False)
    print(f"files, {args.workers} workers x {args.n} episodes, {args.groups} group(s) each, {torch.get_num_threads()} torch threads, "
          f"load {os.getloadavg()}", flush=True)
    load_before = os.getloadavg()
    background = start_background_load(args.background_load)
    runs = []
    try:
        for repeat in range(args.repeats):
            for coalesce in (False, True):
                run = measure(c, config, coalesce, args.workers, args.groups, args.window) | {"repeat": repeat, "load_after": os.getloadavg()}
                runs.append(run)
                print(json.dumps(run), flush=True)
    finally:
        if background is not None:
            background.kill()
            background.wait()
    load_after = os.getloadavg()
    off = [r for r in runs if not r["coalesce"]]
    on = [r for r in runs if r["coalesce"]]
    ratios = [b["trajectories_per_s"] / a["trajectories_per_s"] for a, b in zip(off, on)]
    summary = {
        "trajectories_per_s": {"off": spread([r["trajectories_per_s"] for r in off]), "on": spread([r["trajectories_per_s"] for r in on])},
        "on_over_off_trajectories_per_s": spread(ratios),
        "off_over_on_cpu_seconds_per_trajectory": spread([a["cpu_seconds_per_trajectory"] / b["cpu_seconds_per_trajectory"]
                                                          for a, b in zip(off, on)]),
        "mean_rows_per_decode_step": {"off": spread([r["mean_rows_per_decode_step"] for r in off]),
                                      "on": spread([r["mean_rows_per_decode_step"] for r in on])},
        "mean_rows_per_call": {"off": spread([r["mean_rows_per_call"] for r in off]), "on": spread([r["mean_rows_per_call"] for r in on])},
        "mean_turns": {"off": spread([r["mean_turns"] for r in off]), "on": spread([r["mean_turns"] for r in on])},
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "bench": "agentic_batching", "commit": commit(), "command": command_line(sys.argv),
            "setup": {"family": "files", "config": command_line([str(args.config)]), "model": config.model.name,
                      "init_from": command_line([str(config.model.init_from)]) if config.model.init_from else None,
                      "background_load_threads": args.background_load, "workers": args.workers,
                      "episodes_per_group": args.n, "concurrent_episodes": args.workers * args.n, "groups_per_worker": args.groups,
                      "window_s": args.window, "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"),
                      "max_turns": config.agent.max_turns, "max_tokens_per_turn": config.agent.max_tokens_per_turn,
                      "temperature": config.rollout.temperature, "overrides": args.set},
            "load_average_before": load_before, "load_average_after": load_after,
            "summary": summary, "runs": runs,
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
