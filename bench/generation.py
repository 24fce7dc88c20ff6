"""rlyard's `hf` engine against transformers `generate`, same model, same prompts, same run.

    python bench/generation.py                      # batch 1, 8, 32, 64; 128 new tokens
    python bench/generation.py --batches 32 --new-tokens 64

Greedy decoding with no stop token, so both produce exactly `--new-tokens` tokens per row.
Each measurement runs in a fresh process, so peak RSS belongs to that measurement alone.
"shared" rows give n completions of ONE prompt (rlyard prefills it once); the others use
distinct prompts. Prints tokens/s for each and the ratio rlyard / transformers.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import time


def measure(kind: str, batch: int, new_tokens: int, shared: bool, model_name: str, queue) -> None:
    import torch

    from rlyard.engines import HFEngine
    from rlyard.models import load_model, load_tokenizer
    from rlyard.types import SamplingParams

    torch.manual_seed(0)
    tokenizer, model = load_tokenizer(model_name), load_model(model_name).eval()
    texts = [f"What is {10 + i}+{20 + 2 * i}?" for i in range(1 if shared else batch)]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True, return_dict=False) for t in texts]
    if kind == "rlyard":
        engine = HFEngine(model, tokenizer.pad_token_id)
        params = SamplingParams(temperature=0.0, max_new_tokens=new_tokens)
        run = lambda: engine.generate(prompts, params, n=batch if shared else 1)  # noqa: E731
    else:
        rows = prompts * batch if shared else prompts
        width = max(len(p) for p in rows)
        ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + list(p) for p in rows])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])

        def run():
            with torch.no_grad():
                return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                      do_sample=False, pad_token_id=tokenizer.pad_token_id)
    run()  # warm-up (allocator, kernels)
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({"kind": kind, "batch": batch, "shared": shared, "tokens_per_s": batch * new_tokens / seconds, "peak_rss_mb": peak_mb})


def run_isolated(*args) -> dict:
    queue = mp.get_context("spawn").Queue()
    process = mp.get_context("spawn").Process(target=measure, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    print(f"{'batch':>5} {'prompts':>8} {'transformers tok/s':>19} {'rlyard tok/s':>13} {'ratio':>6} {'peak MB (hf / rlyard)':>22}")
    for batch in args.batches:
        for shared in ([False, True] if batch > 1 else [False]):
            hf = run_isolated("transformers", batch, args.new_tokens, shared, args.model)
            ours = run_isolated("rlyard", batch, args.new_tokens, shared, args.model)
            rows += [hf, ours]
            print(f"{batch:>5} {'1 shared' if shared else 'distinct':>8} {hf['tokens_per_s']:>19.1f} {ours['tokens_per_s']:>13.1f} "
                  f"{ours['tokens_per_s'] / hf['tokens_per_s']:>5.2f}x {hf['peak_rss_mb']:>10.0f} / {ours['peak_rss_mb']:<8.0f}", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
