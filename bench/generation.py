"""rlyard's `hf` engine against transformers `generate`, same model, same prompts, same run.

    python bench/generation.py                        # batch 1, 8, 32, 64; distinct and shared prompts
    python bench/generation.py --batches 32 --new-tokens 64 --prompts shared --repeats 3
    python bench/generation.py --sides transformers rlyard   # leave out the int8 engine

Greedy decoding with no stop token, so both produce exactly `--new-tokens` tokens per row and
the figures compare decoding alone (in training, where replies stop early, rlyard also drops
finished rows). "shared" rows are n completions of ONE prompt (rlyard prefills it once and
shares its KV cache; transformers gets the prompt n times); "distinct" rows use n prompts
(they share the chat template's system prompt, which rlyard prefills once).

Three sides: transformers `generate` (fp32), rlyard's engine in fp32, and rlyard's engine with
int8 decoding (`rollout.quantize=int8`). The int8 side's warm-up call is its fp32 calibration
batch; after timing it samples at T=0.7 and reports the mean |logprob gap| of its tokens
against an fp32 recompute (what the learner's TIS weight corrects).

Each measurement runs in a fresh process: one warm-up call, then `--repeats` timed calls, of
which the median is reported. Memory is that process's peak RSS (VmHWM) over the timed calls,
reset after the warm-up: "peak MB" is the whole process (model included), "+MB" the growth
above the RSS with the model loaded, i.e. what the KV cache and activations cost.
The two sides alternate (transformers, rlyard, transformers, ...) so a load spike from other
processes hits both; the load average is printed so a busy machine shows.
"""
from __future__ import annotations

import argparse
import copy
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

# OMP_WAIT_POLICY: see bench/vs_trl.py (PASSIVE on a busy shared machine, unset when idle).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it


SIDES = ("transformers", "rlyard", "rlyard-int8")


def rss_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def measure(kind: str, batch: int, new_tokens: int, shared: bool, model_name: str, repeats: int, threads: int | None, queue) -> None:
    import torch

    from rlyard.engines import HFEngine
    from rlyard.models import load_model, load_tokenizer
    from rlyard.types import SamplingParams

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    tokenizer, model = load_tokenizer(model_name), load_model(model_name).eval()
    texts = [f"What is {10 + i}+{20 + 2 * i}?" for i in range(1 if shared else batch)]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True, return_dict=False) for t in texts]
    if kind.startswith("rlyard"):
        quantize = "int8" if kind == "rlyard-int8" else "none"
        engine = HFEngine(copy.deepcopy(model) if quantize == "int8" else model, tokenizer.pad_token_id, quantize=quantize)
        run = lambda tokens=new_tokens: engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=tokens), n=batch if shared else 1)
    else:
        rows = prompts * batch if shared else prompts
        width = max(len(p) for p in rows)
        ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + list(p) for p in rows])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])

        def run(tokens=new_tokens):
            with torch.no_grad():
                return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                                      do_sample=False, pad_token_id=tokenizer.pad_token_id)
    run(4)  # warm-up (allocator, kernels): the full prefill, a few decode steps
    loaded_mb = rss_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak below is the timed calls' alone
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    peak_mb = rss_mb("VmHWM")
    gap = logprob_gap(engine, model, prompts, batch if shared else 1) if kind == "rlyard-int8" else None
    queue.put({"kind": kind, "batch": batch, "shared": shared, "new_tokens": new_tokens, "seconds": seconds,
               "tokens_per_s": batch * new_tokens / statistics.median(seconds), "peak_rss_mb": peak_mb,
               "peak_over_loaded_mb": max(0.0, peak_mb - loaded_mb), "threads": torch.get_num_threads(),
               "logprob_gap": gap})


def logprob_gap(engine, fp32_model, prompts, n: int) -> float:
    """Mean |engine logprob - fp32 recompute| over tokens sampled at T=0.7 (at most 8 prompts x 4)."""
    import torch

    from rlyard.train.logprobs import continuation_logprobs
    from rlyard.types import SamplingParams

    prompts = prompts[:8]
    groups = engine.generate(prompts, SamplingParams(temperature=0.7, max_new_tokens=32, seed=0), n=min(n, 4))
    gaps = []
    with torch.no_grad():
        for prompt, group in zip(prompts, groups):
            tokens = [c.token_ids for c in group]
            exact = continuation_logprobs(fp32_model, prompt, tokens, [[1] * len(t) for t in tokens], 0.7, with_entropy=False)
            gaps += [(torch.tensor(c.logprobs) - lp).abs() for c, lp in zip(group, exact.logprobs)]
    return float(torch.cat(gaps).mean())


def run_isolated(*args) -> dict:
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=measure, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64], help="rows per call (default 1 8 32 64)")
    parser.add_argument("--prompts", nargs="+", choices=["distinct", "shared"], default=["distinct", "shared"],
                        help="distinct prompts and/or n completions of one shared prompt (batch 1 is always distinct)")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per row (default 64)")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per measurement; the median is reported")
    parser.add_argument("--rounds", type=int, default=1, help="alternate the sides this many times; medians reported")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES), help="what to measure (default: all three)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    sides = [side for side in SIDES if side in args.sides]
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'batch':>5} {'prompts':>8} " + " ".join(f"{side + ' tok/s':>18}" for side in sides)
          + " " + " ".join(f"{'x ' + side:>13}" for side in sides[1:]) + f" {'int8 gap':>8}  peak MB (+MB) per side")
    rows = []
    for batch in args.batches:
        for shared in dict.fromkeys(p == "shared" and batch > 1 for p in args.prompts):
            runs: dict[str, list[dict]] = {side: [] for side in sides}
            for _ in range(args.rounds):
                for kind, measured in runs.items():
                    measured.append(run_isolated(kind, batch, args.new_tokens, shared, args.model, args.repeats, args.threads))
            medians = {kind: {**r[0], "tokens_per_s": statistics.median(x["tokens_per_s"] for x in r), "rounds": [x["tokens_per_s"] for x in r]}
                       for kind, r in runs.items()}
            rows += list(medians.values())
            base = medians[sides[0]]["tokens_per_s"]
            gap = medians.get("rlyard-int8", {}).get("logprob_gap")
            print(f"{batch:>5} {'1 shared' if shared else 'distinct':>8} "
                  + " ".join(f"{m['tokens_per_s']:>18.1f}" for m in medians.values()) + " "
                  + " ".join(f"{m['tokens_per_s'] / base:>12.2f}x" for m in list(medians.values())[1:])
                  + f" {'-' if gap is None else format(gap, '.3f'):>8}  "
                  + " / ".join(f"{m['peak_rss_mb']:.0f} (+{m['peak_over_loaded_mb']:.0f})" for m in medians.values()), flush=True)
    print(f"load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({"load_average_end": os.getloadavg(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
