"""Async against sync training on an environment with long-tail grading latency, same run.

    python bench/async_vs_sync.py                     # arith + the embedded model with LoRA, ~15 min on 2 CPUs
    python bench/async_vs_sync.py --task toy          # a tiny random llama on a toy task, ~3 min
    python bench/async_vs_sync.py --seeds 0 1 2 --json bench/results/async_vs_sync.json   # every run, mean and spread
    python bench/async_vs_sync.py --steps 40 --workers 12 --delay-sigma 1.5

Every reply is graded by a service with lognormal latency (median --delay-median s, log-std
--delay-sigma), like a remote sandbox or an LLM judge: a submitted reply is graded concurrently
with the others, so the sync loop waits for the slowest grade of its batch (the long tail), not
for the sum of them. A reply cut by the token cap is not submitted (reward 0, no grading).

--task arith (the default): the quickstart's task and verifier, the embedded SmolLM2-135M with
LoRA, 4 prompts x 8 samples of 16 tokens, lr 5e-4; after training both runs are evaluated on the
same 100 held-out tasks (greedy, 32 tokens), so "no loss of reward" is checked on held-out
accuracy as well as on the training reward. --task toy: reward 1 when the reply contains
--target, a 2-layer random llama (hidden 64) whose end-of-turn logit is raised so that replies
end by themselves after a few tokens, full fine-tuning at lr 1e-3 (fast, but a fragile learner).

Both modes run the same model, seed and settings for the same number of steps, so they train on
the same number of samples. Printed: trajectories/s and trained (sampled) tokens/s over the
whole train() call (evaluation excluded), the reward of the first and last quarter of the steps,
held-out accuracy, and the async / sync ratios.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlyard.config import load_config
from rlyard.envs.arith import make_tasks as arith_tasks
from rlyard.envs.arith import verify as arith_verify
from rlyard.envs import Family, StepResult, register
from rlyard.observe.metrics import read_metrics
from rlyard.orchestrate.entry import train
from rlyard.types import Reward, Task
from provenance import commit  # bench/ is on sys.path when a script runs

TARGET = "e"  # --target


class LatencyGrader:
    """A grading service: every submitted reply is graded after its own lognormal delay, concurrently."""

    def __init__(self, median: float, sigma: float, seed: int):
        self.median, self.sigma = median, sigma
        self.rng, self.lock = random.Random(seed), threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=512, thread_name_prefix="grader")

    def submit(self, reply: str, verify=None):
        with self.lock:
            delay = self.median * math.exp(self.rng.gauss(0.0, self.sigma))
        return self.pool.submit(self._grade, reply, delay, verify or toy_verify)

    @staticmethod
    def _grade(reply: str, delay: float, verify) -> Reward:
        time.sleep(delay)
        verdict = verify(reply)
        return Reward(verdict.value, dict(verdict.components), {"delay_s": delay})


def toy_verify(reply: str) -> Reward:
    hit = float(TARGET in reply)
    return Reward(hit, {"hit": hit})


GRADER: LatencyGrader | None = None


class LatencyEnv:
    def reset(self, task: Task):
        self.pending = None
        return list(task.prompt)

    def step(self, reply: str) -> StepResult:
        self.pending = GRADER.submit(reply)  # submitted: graded in the background
        return StepResult(done=True, reason="submitted")

    def score(self) -> Reward:
        return self.pending.result() if self.pending is not None else Reward(0.0, {"hit": 0.0})

    def close(self) -> None:
        pass


class LatencyArithEnv(LatencyEnv):
    """arith's verifier behind the latency grader."""

    def reset(self, task: Task):
        self.task = task
        return super().reset(task)

    def step(self, reply: str) -> StepResult:
        self.pending = GRADER.submit(reply, lambda text: arith_verify(text, self.task))
        return StepResult(done=True, reason="submitted")


register(Family("latency_arith", arith_tasks, LatencyArithEnv, verify=arith_verify, multi_turn=True,
                description="bench: arith graded by a service with lognormal latency"))


def latency_tasks(split: str, n: int, seed: int, **options) -> list[Task]:
    return [Task(f"latency-{split}-{i}", [{"role": "user", "content": "Say something."}], "latency") for i in range(n)]


register(Family("latency", latency_tasks, LatencyEnv, verify=lambda reply, task: Reward(float(TARGET in reply)),
                description="bench: the toy task graded by a service with lognormal latency", multi_turn=True))


def tiny_model_dir(folder: Path, stop_logit: float) -> Path:
    """A random 2-layer llama with the real tokenizer; its end-of-turn logit sits near `stop_logit`."""
    import torch
    import transformers

    from rlyard.models import load_tokenizer
    from rlyard.orchestrate.setup import stop_tokens

    tokenizer = load_tokenizer("embedded")
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Say something."}], add_generation_prompt=True,
                                           tokenize=True, return_dict=False)
    with torch.no_grad():  # the mean final hidden state over a few random continuations
        ids = torch.tensor([list(prompt) + torch.randint(0, len(tokenizer), (12,)).tolist() for _ in range(16)])
        mean = model.model(input_ids=ids).last_hidden_state[:, len(prompt) - 1:].reshape(-1, 64).mean(0)
        for stop in stop_tokens(tokenizer):
            model.lm_head.weight[stop] = stop_logit * mean / mean.norm() ** 2
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run_mode(mode: str, args, model: str, root: Path) -> dict:
    global GRADER
    GRADER = LatencyGrader(args.delay_median, args.delay_sigma, args.seed)  # the same delays, drawn in order
    run_dir = root / mode
    task = TASKS[args.task]
    config = load_config(None, [
        f"model.name={model}", f"env.name={task['env']}", f"env.train_size={task['train_size']}", f"rollout.prompts_per_step={args.prompts}",
        f"rollout.n={args.n}", f"rollout.max_new_tokens={args.max_new_tokens}", f"agent.max_tokens_per_turn={args.max_new_tokens}",
        "agent.max_turns=1", "rollout.temperature=0.7", f"train.steps={args.steps}", f"train.seed={args.seed}",
        f"train.threads={args.threads}", f"eval.size={task['eval_size']}", "eval.at_start=false", f"eval.max_new_tokens={task['eval_tokens']}",
        "output.progress=false", "output.plot=false", "output.checkpoint_every=0",
        f"algo.lr={args.lr}", f"model.lora.enabled={str(args.lora).lower()}", f"orchestrate.mode={mode}",
        f"orchestrate.workers={args.workers}", f"orchestrate.max_staleness={args.max_staleness}",
        f"orchestrate.staleness_policy={args.policy}", "algo.decoupled=true", *args.set,
    ])
    started = time.perf_counter()
    outcome = train(config, run_dir)
    wall = outcome.train_seconds if args.task == "arith" else time.perf_counter() - started
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    metrics = read_metrics(run_dir / "metrics.jsonl")
    rewards = [m["reward/mean"] for m in metrics if "reward/mean" in m]
    k = max(1, len(rewards) // 4)
    result = {
        "mode": mode, "wall_s": wall, "trajectories": len(rows), "trajectories_per_s": len(rows) / wall,
        "trained_tokens_per_s": sum(r["num_tokens"] for r in rows) / wall,
        "reward_first": statistics.fmean(rewards[:k]), "reward_last": statistics.fmean(rewards[-k:]),
        "heldout_accuracy": outcome.final_accuracy,
    }
    if mode == "async":
        staleness = [m["rollout/staleness_mean"] for m in metrics if "rollout/staleness_mean" in m]
        result["staleness_mean"] = statistics.fmean(staleness)
        result["stale_groups_dropped"] = sum(m["rollout/stale_groups_dropped"] for m in metrics if "reward/mean" in m)
    return result


TASKS = {  # per task: the environment and the defaults that differ
    "arith": {"env": "latency_arith", "train_size": 20000, "eval_size": 100, "eval_tokens": 32, "model": "embedded", "lora": True,
              "lr": 5e-4, "prompts": 4, "n": 8, "max_new_tokens": 16, "workers": 8, "delay_median": 1.0, "delay_sigma": 1.2, "steps": 20,
              "threads": 1, "max_staleness": 1, "policy": "wait"},
    "toy": {"env": "latency", "train_size": 64, "eval_size": 0, "eval_tokens": 12, "model": None, "lora": False,
            "lr": 1e-3, "prompts": 8, "n": 4, "max_new_tokens": 12, "workers": 12, "delay_median": 0.3, "delay_sigma": 1.0, "steps": 16,
            "threads": 1, "max_staleness": 2, "policy": "drop"},
}


def main() -> None:
    global TARGET
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), default="arith", help="arith (embedded model, LoRA) or toy (tiny random llama)")
    parser.add_argument("--model", default=None, help="default: embedded for arith, a tiny random llama built here for toy")
    parser.add_argument("--steps", type=int, help="default: 20 (arith), 16 (toy)")
    parser.add_argument("--prompts", type=int, help="rollout.prompts_per_step; default 4 (arith), 8 (toy)")
    parser.add_argument("--n", type=int, help="samples per prompt; default 8 (arith), 4 (toy)")
    parser.add_argument("--max-new-tokens", type=int, help="default 16 (arith), 12 (toy)")
    parser.add_argument("--workers", type=int, help="async rollout threads; default 8 (arith), 12 (toy)")
    parser.add_argument("--max-staleness", type=int, help="default 1 (arith), 2 (toy)")
    parser.add_argument("--policy", choices=["drop", "wait"], help="orchestrate.staleness_policy; default wait (arith), drop (toy)")
    parser.add_argument("--delay-median", type=float, help="grading latency median, seconds; default 1.0 (arith), 0.3 (toy)")
    parser.add_argument("--delay-sigma", type=float, help="log-std of the grading latency (the tail); default 1.2 (arith), 1.0 (toy)")
    parser.add_argument("--target", default="e", help="reward 1 when the reply contains this text")
    parser.add_argument("--lr", type=float, help="default 5e-4 (arith), 1e-3 (toy)")
    parser.add_argument("--lora", action=argparse.BooleanOptionalAction, help="LoRA (default for arith) or full fine-tuning (toy)")
    parser.add_argument("--threads", type=int, help="torch threads, both modes; default 1 (several rollout threads share 2 cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, nargs="+", help="run both modes once per seed and report the mean and spread of the ratios")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more config overrides, for both modes")
    parser.add_argument("--modes", nargs="+", default=["sync", "async"], choices=["sync", "async"], help="e.g. only one, to tune")
    parser.add_argument("--keep", type=Path, help="keep the two run folders (and the model) here")
    args = parser.parse_args()
    for key, value in TASKS[args.task].items():
        if hasattr(args, key) and getattr(args, key) is None:
            setattr(args, key, value)
    TARGET = args.target
    seeds = args.seeds or [args.seed]
    per_seed = []
    for seed in seeds:
        args.seed = seed
        with tempfile.TemporaryDirectory(prefix="rlyard-async-bench-") as tmp:
            root = (args.keep / f"seed{seed}") if args.keep else Path(tmp)
            model = args.model or str(tiny_model_dir(root / "model", stop_logit=5.5))  # only toy has no default model
            results = [run_mode(mode, args, model, root) for mode in args.modes]
        if args.modes != ["sync", "async"]:
            print(json.dumps(results, indent=2))
            continue
        per_seed.append(report(args, results, seed))
    if len(per_seed) > 1:
        for key in ("ratio_trajectories", "ratio_tokens"):
            values = [r[key] for r in per_seed]
            print(f"{key}: mean {statistics.fmean(values):.2f}x, sd {statistics.stdev(values):.2f}, "
                  f"min {min(values):.2f}x, max {max(values):.2f}x over seeds {seeds}")
        for mode in ("sync", "async"):
            acc = [next(r for r in s["results"] if r["mode"] == mode)["heldout_accuracy"] for s in per_seed]
            if None not in acc:
                print(f"{mode} held-out accuracy: mean {statistics.fmean(acc):.1%}, sd {statistics.stdev(acc):.1%}")
    if args.json and per_seed:
        settings = {k: str(v) for k, v in vars(args).items() if k not in ("json", "keep", "seed", "seeds")}
        args.json.write_text(json.dumps({"command": "python bench/async_vs_sync.py " + " ".join(sys.argv[1:]).replace(str(args.json), args.json.name),
                                         "commit": commit(), "settings": settings, "seeds": per_seed,
                                         "load_average_end": os.getloadavg()}, indent=2))


def report(args, results: list[dict], seed: int) -> dict:
    sync, async_ = results
    print(f"\nseed {seed}: task {args.task}, model {args.model or 'tiny random llama'}{' + LoRA' if args.lora else ''}; {args.steps} steps x {args.prompts} prompts x {args.n} samples; "
          f"grading latency lognormal(median {args.delay_median} s, sigma {args.delay_sigma}); async: {args.workers} workers, "
          f"max_staleness {args.max_staleness} ({args.policy}), {args.threads} torch thread(s), decoupled PPO")
    print(f"| mode | train s | trajectories/s | trained tokens/s | reward first {max(1, args.steps // 4)} steps | reward last | held-out accuracy |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        accuracy = "-" if r["heldout_accuracy"] is None else f"{r['heldout_accuracy']:.1%}"
        print(f"| {r['mode']} | {r['wall_s']:.1f} | {r['trajectories_per_s']:.2f} | {r['trained_tokens_per_s']:.1f} | "
              f"{r['reward_first']:.3f} | {r['reward_last']:.3f} | {accuracy} |")
    ratio = async_["trajectories_per_s"] / sync["trajectories_per_s"]
    token_ratio = async_["trained_tokens_per_s"] / sync["trained_tokens_per_s"]
    print(f"async / sync: {ratio:.2f}x trajectories/s, {token_ratio:.2f}x trained tokens/s; "
          f"async staleness mean {async_['staleness_mean']:.2f}, stale groups dropped {async_['stale_groups_dropped']:.0f}; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return {"seed": seed, "results": results, "ratio_trajectories": ratio, "ratio_tokens": token_ratio,
            "load_average": os.getloadavg()}


if __name__ == "__main__":
    main()
