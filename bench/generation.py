"""rlyard's `hf` engine against transformers `generate`, same model, same prompts, same run.

    python bench/generation.py                        # batch 1, 8, 32, 64; distinct and shared prompts
    python bench/generation.py --batches 32 --new-tokens 64 --prompts shared --repeats 3

Greedy decoding with no stop token, so both produce exactly `--new-tokens` tokens per row and
the figures compare decoding alone (in training, where replies stop early, rlyard also drops
finished rows). "shared" rows are n completions of ONE prompt (rlyard prefills it once and
shares its KV cache; transformers gets the prompt n times); "distinct" rows use n prompts.

Each measurement runs in a fresh process: one warm-up call, then `--repeats` timed calls, of
which the median is reported. Memory is that process's peak RSS (VmHWM) over the timed calls,
reset after the warm-up: "peak MB" is the whole process (model included), "+MB" the growth
above the RSS with the model loaded, i.e. what the KV cache and activations cost.
The two sides alternate (transformers, rlyard, transformers, ...) so a load spike from other
processes hits both; the load average is printed so a busy machine shows.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

# OMP_WAIT_POLICY: see bench/vs_trl.py (PASSIVE on a busy shared machine, unset when idle).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it


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
    if kind == "rlyard":
        engine = HFEngine(model, tokenizer.pad_token_id)
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
    queue.put({"kind": kind, "batch": batch, "shared": shared, "new_tokens": new_tokens, "seconds": seconds,
               "tokens_per_s": batch * new_tokens / statistics.median(seconds), "peak_rss_mb": peak_mb,
               "peak_over_loaded_mb": max(0.0, peak_mb - loaded_mb), "threads": torch.get_num_threads()})


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
    parser.add_argument("--rounds", type=int, default=1, help="alternate the two sides this many times; medians reported")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'batch':>5} {'prompts':>8} {'transformers tok/s':>19} {'rlyard tok/s':>13} {'ratio':>6} "
          f"{'peak MB (hf / rlyard)':>22} {'+MB (hf / rlyard)':>18}")
    rows = []
    for batch in args.batches:
        for shared in dict.fromkeys(p == "shared" and batch > 1 for p in args.prompts):
            runs = {"transformers": [], "rlyard": []}
            for _ in range(args.rounds):
                for kind, measured in runs.items():
                    measured.append(run_isolated(kind, batch, args.new_tokens, shared, args.model, args.repeats, args.threads))
            hf, ours = ({**r[0], "tokens_per_s": statistics.median(x["tokens_per_s"] for x in r), "rounds": [x["tokens_per_s"] for x in r]}
                        for r in runs.values())
            rows += [hf, ours]
            print(f"{batch:>5} {'1 shared' if shared else 'distinct':>8} {hf['tokens_per_s']:>19.1f} {ours['tokens_per_s']:>13.1f} "
                  f"{ours['tokens_per_s'] / hf['tokens_per_s']:>5.2f}x {hf['peak_rss_mb']:>10.0f} / {ours['peak_rss_mb']:<9.0f} "
                  f"{hf['peak_over_loaded_mb']:>7.0f} / {ours['peak_over_loaded_mb']:<7.0f}", flush=True)
    print(f"load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({"load_average_end": os.getloadavg(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
