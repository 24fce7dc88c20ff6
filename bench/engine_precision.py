"""Engine and training precision on this machine: float32, bf16 weights, autocast, int8.

    python bench/engine_precision.py --json bench/results/engine_precision.json

For the embedded SmolLM2-135M: the time of a decode step (48 tokens from 2-token prompts) at
batch 8 and 50, of prefilling 50 prompts of 300 to 643 tokens, and of one SFT forward+backward
(LoRA, 4 x 480 tokens) in float32 and under bf16 autocast. Each figure is the median of
--repeats runs (decode and SFT after a warm-up run; prefill after the engine's small warm-up batch);
the spread (min, max) is kept in the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
from provenance import commit  # bench/ is on sys.path when a script runs
from rlyard.config import ModelConfig
from rlyard.engines import HFEngine
from rlyard.models import load_model, load_tokenizer
from rlyard.orchestrate.setup import policy_model
from rlyard.sft.batching import Example
from rlyard.sft.train import token_nll
from rlyard.types import SamplingParams

ENGINES = ("float32", "autocast-bf16", "bf16-weights", "int8")


def prompts(batch: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[1] + [rng.randrange(100, 40000) for _ in range(300 + 7 * i)] for i in range(batch)]


def engine(mode: str, pad: int) -> HFEngine:
    model = load_model("embedded").requires_grad_(False)
    if mode == "bf16-weights":
        return HFEngine(model.to(torch.bfloat16), pad)
    if mode == "autocast-bf16":
        return HFEngine(model, pad, autocast_dtype=torch.bfloat16)
    return HFEngine(model, pad, quantize="int8" if mode == "int8" else "none")


def timed(fn, repeats: int, warm_up: bool = True) -> dict[str, float]:
    if warm_up:
        fn()
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return {"median": statistics.median(runs), "min": min(runs), "max": max(runs)}


def engine_figures(mode: str, pad: int, repeats: int) -> dict:
    eng = engine(mode, pad)
    eng.generate(prompts(8), SamplingParams(temperature=0.8, max_new_tokens=4, seed=0))  # warm-up; int8: the calibrating batch
    out = {}
    for batch in (8, 50):
        starts = [p[:2] for p in prompts(batch)]
        decode = timed(lambda: eng.generate(starts, SamplingParams(temperature=0.8, max_new_tokens=48, seed=0)), repeats)
        out[f"decode_step_ms_batch{batch}"] = {k: v / 48 * 1000 for k, v in decode.items()}
    full = prompts(50)
    out["prefill_s_50_prompts"] = timed(lambda: eng.generate(full, SamplingParams(temperature=0.8, max_new_tokens=1, seed=0)), repeats,
                                        warm_up=False)
    out["prefill_tokens"] = sum(map(len, full))
    return out


def sft_figures(repeats: int) -> dict:
    model = policy_model(ModelConfig())
    examples = [Example(token_ids=list(range(100, 580)), loss_mask=[0] * 200 + [1] * 280, source="bench") for _ in range(4)]
    out = {}
    for name, precision in (("float32", None), ("autocast-bf16", torch.bfloat16)):
        def step():
            nll, count = token_nll(model, examples, precision)
            (nll / count).backward()
            model.zero_grad(set_to_none=True)
        out[name] = timed(step, repeats)
    return out


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pad = load_tokenizer("embedded").pad_token_id
    result = {
        "commit": commit(),
        "machine": {"cpu": cpu_name(), "amx_bf16": "amx_bf16" in Path("/proc/cpuinfo").read_text(), "threads": args.threads, "torch": torch.__version__,
                    "load_average_at_start": os.getloadavg()},
        "repeats": args.repeats, "engines": {}, "sft_step_s": sft_figures(args.repeats),
    }
    for mode in args.engines:
        result["engines"][mode] = figures = engine_figures(mode, pad, args.repeats)
        print(f"{mode:14} decode ms/step b8 {figures['decode_step_ms_batch8']['median']:6.0f}  "
              f"b50 {figures['decode_step_ms_batch50']['median']:6.0f}  prefill {figures['prefill_s_50_prompts']['median']:6.1f} s",
              flush=True)
    for name, figure in result["sft_step_s"].items():
        print(f"sft step {name:14} {figure['median']:.2f} s")
    result["machine"]["load_average_at_end"] = os.getloadavg()
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
