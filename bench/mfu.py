"""Model FLOP utilisation: rlyard's training step (and decoding) against this machine's matmul peak.

    python bench/mfu.py                   # peak, then 5 timed learner steps and a decode run (~2 min)
    python bench/mfu.py --steps 3 --no-generation

1. Peak: fp32 square matmuls (n = 256 ... 2048) with torch in this process, the best GFLOP/s
   of any size (2 n^3 FLOPs each).
2. Training: `Learner.train_step` of the quickstart's shape (embedded model, LoRA r 16 on all
   seven projections, 4 prompts x 8 completions of --completion-tokens tokens, the arith chat
   prompt, micro-batches of 8 that share their prompt). The FLOPs are counted from the tokens
   the learner actually runs (formula printed below) and divided by the median step time.
3. Generation (optional): greedy decoding of 32 rows x --completion-tokens tokens by the hf engine.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch  # OMP_WAIT_POLICY: see bench/vs_trl.py

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
from rlyard.config import DEFAULT_LORA_TARGETS, AlgoConfig
from rlyard.engines import HFEngine
from rlyard.models import add_lora, load_model, load_tokenizer
from rlyard.train import Learner
from rlyard.types import SamplingParams, Trajectory
from provenance import commit  # bench/ is on sys.path when a script runs


def matmul_peak(sizes=(256, 512, 1024, 1536, 2048), seconds_each: float = 1.0) -> tuple[float, dict[int, float]]:
    """Best fp32 GFLOP/s of square matmuls; each size runs for about `seconds_each` after a warm-up."""
    found = {}
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        best, deadline = 0.0, time.perf_counter() + seconds_each
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - started) / 1e9)
        found[n] = best
    return max(found.values()), found


def linear_params(model) -> tuple[int, int, int]:
    """(frozen base weights inside the decoder layers, LoRA weights, hidden size x vocabulary of the LM head)."""
    base = lora = 0
    for name, param in model.named_parameters():
        if ".layers." not in name or param.dim() != 2:
            continue
        if "lora_" in name:
            lora += param.numel()
        else:
            base += param.numel()
    config = model.config
    return base, lora, config.hidden_size * config.vocab_size


def attention_flops(config, queries: int, context: int) -> int:
    """QK^T and AV for `queries` tokens over `context` keys, all layers: 2 matmuls x 2 FLOPs."""
    return 4 * config.num_hidden_layers * config.num_attention_heads * (config.hidden_size // config.num_attention_heads) * queries * context


def make_batch(tokenizer, prompts: int, n: int, length: int, seed: int = 0) -> tuple[list[Trajectory], list[float]]:
    rng = random.Random(seed)
    batch, advantages = [], []
    for p in range(prompts):
        x, y = rng.randint(10, 99), rng.randint(10, 99)
        prompt = list(tokenizer.apply_chat_template([{"role": "user", "content": f"What is {x}+{y}?"}],
                                                    add_generation_prompt=True, tokenize=True, return_dict=False))
        for i in range(n):
            reply = [rng.randrange(1000, 20000) for _ in range(length)]
            batch.append(Trajectory(task_id=f"t{p}", group_id=f"0/{p}", token_ids=prompt + reply,
                                    loss_mask=[0] * len(prompt) + [1] * length, behaviour_logprobs=[0.0] * len(prompt) + [-2.0] * length,
                                    policy_versions=[-1] * len(prompt) + [0] * length, reward=float(i % 2)))
            advantages.append(1.0 if i % 2 else -1.0)  # nonzero, so no sequence is skipped
    return batch, advantages


def training_flops(model, batch: list[Trajectory], micro: int) -> tuple[float, str]:
    """FLOPs the learner executes for one train_step, and the formula in words."""
    base, lora, head = linear_params(model)
    config = model.config
    tokens = queries_attn = 0
    head_tokens = sum(t.num_sampled_tokens for t in batch)
    attention = 0
    groups: dict[str, list[Trajectory]] = {}
    for t in batch:
        groups.setdefault(t.group_id, []).append(t)
    for members in groups.values():
        for start in range(0, len(members), micro):
            chunk = members[start : start + micro]
            prefix = chunk[0].prompt_length
            width = max(t.num_sampled_tokens for t in chunk)
            # the prompt once, then each continuation (padded to the widest) over the prompt's cache
            tokens += prefix + len(chunk) * (width - 1)
            attention += attention_flops(config, prefix, prefix // 2) + attention_flops(config, len(chunk) * (width - 1), prefix + width // 2)
            queries_attn += prefix + len(chunk) * (width - 1)
    forward = 2 * (base + lora) * tokens + 2 * head * head_tokens + attention
    # backward: activation gradients through every matmul (= forward), weight gradients only for LoRA
    backward = 2 * (base + lora) * tokens + 2 * head * head_tokens + 2 * attention + 2 * lora * tokens
    formula = (f"forward  = 2*(N_base + N_lora)*T + 2*d*V*S + attn = 2*({base/1e6:.1f}M + {lora/1e6:.2f}M)*{tokens} + 2*{head/1e6:.1f}M*{head_tokens} + {attention/1e9:.2f} GFLOP\n"
               f"backward = forward (activation grads) + attn once more (dQ, dK, dV) + 2*N_lora*T (LoRA weight grads); frozen weights get none\n"
               f"  T = tokens run (each prompt once per micro-batch + continuations padded to the widest), S = sampled tokens "
               f"(the LM head runs only there), attn = 4*layers*d*queries*keys, N_* = weights inside the decoder layers")
    return forward + backward, formula


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5, help="timed learner steps after one warm-up (median reported)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--completion-tokens", type=int, default=16, help="tokens per completion (default 16)")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--no-generation", action="store_true", help="skip the decoding MFU")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--json", type=Path, help="also write the figures (with the commit and the load) here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"threads {torch.get_num_threads()}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")

    peak, per_size = matmul_peak()
    print("matmul peak (fp32): " + ", ".join(f"n={n}: {g:.1f}" for n, g in per_size.items()) + f" GFLOP/s -> peak {peak:.1f} GFLOP/s")

    tokenizer = load_tokenizer(args.model)
    model = add_lora(load_model(args.model), 16, 32, 0.0, list(DEFAULT_LORA_TARGETS))
    learner = Learner(model, AlgoConfig(lr=5e-4), temperature=0.7, micro_batch_size=args.micro_batch, max_new_tokens=args.completion_tokens)
    batch, advantages = make_batch(tokenizer, args.prompts, args.n, args.completion_tokens)
    flops, formula = training_flops(model, batch, args.micro_batch)
    learner.train_step(batch, advantages, 0)  # warm-up
    times = []
    for step in range(args.steps):
        started = time.perf_counter()
        learner.train_step(batch, advantages, step + 1)
        times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    print(f"\ntraining step ({args.prompts} prompts x {args.n} completions of {args.completion_tokens} tokens, LoRA r16): "
          f"median {seconds:.2f} s of {', '.join(f'{t:.2f}' for t in times)}")
    print(formula)
    print(f"  = {flops / 1e9:.1f} GFLOP per step -> {flops / seconds / 1e9:.1f} GFLOP/s = {flops / seconds / 1e9 / peak:.1%} of the peak")
    out = {"command": "python bench/mfu.py " + " ".join(sys.argv[1:]).replace(str(args.json), args.json.name if args.json else ""),
           "commit": commit(), "threads": torch.get_num_threads(), "load_average_before": load_before,
           "peak_gflops": peak, "peak_by_size": per_size, "train_step_seconds": times, "train_step_gflop": flops / 1e9,
           "train_gflops": flops / seconds / 1e9, "train_mfu": flops / seconds / 1e9 / peak}

    if not args.no_generation:
        engine_model = load_model(args.model).eval()
        engine = HFEngine(engine_model, tokenizer.pad_token_id)
        prompts = [tok for tok in {tuple(t.token_ids[: t.prompt_length]) for t in batch}]
        rows, new = 32, args.completion_tokens
        params = SamplingParams(temperature=0.0, max_new_tokens=new)
        engine.generate([list(p) for p in prompts], SamplingParams(temperature=0.0, max_new_tokens=2), n=rows // len(prompts))
        started = time.perf_counter()
        engine.generate([list(p) for p in prompts], params, n=rows // len(prompts))
        seconds = time.perf_counter() - started
        base, _, head = linear_params(engine_model)
        prompt_len = len(prompts[0])
        # prefill each prompt once, then one token per row per step over a growing cache
        gen_flops = (2 * base * prompt_len * len(prompts) + attention_flops(engine_model.config, prompt_len, prompt_len // 2) * len(prompts)
                     + rows * new * (2 * base + 2 * head) + attention_flops(engine_model.config, rows * new, prompt_len + new // 2))
        print(f"\ngeneration ({rows} rows x {new} tokens, greedy, {len(prompts)} prompts shared): {rows * new / seconds:.0f} tokens/s, "
              f"{gen_flops / seconds / 1e9:.1f} GFLOP/s = {gen_flops / seconds / 1e9 / peak:.1%} of the peak")
        print("  FLOPs = prefill 2*N_base*P per prompt + per generated token (2*N_base + 2*d*V + attn)")
        out |= {"decode_tokens_per_s": rows * new / seconds, "decode_gflops": gen_flops / seconds / 1e9,
                "decode_mfu": gen_flops / seconds / 1e9 / peak}
    out["load_average_after"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")



if __name__ == "__main__":
    main()
