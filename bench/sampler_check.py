"""Do rlyard's engine and transformers' `generate` (TRL's sampler) draw from the same distribution?

    python bench/sampler_check.py                          # the embedded base model
    python bench/sampler_check.py --run RUN_DIR            # a trained run of bench/vs_trl.py (its last checkpoint, merged)

Same float32 model, same held-out `arith` prompts (rendered as rlyard renders them), same
temperature, token budget and end-of-turn tokens (TRL's GRPOTrainer settings: top_k 0, top_p 1,
no min_p, no repetition penalty). Each side draws --samples completions of every prompt. One
teacher-forced scorer then measures both sides' samples alike: the mean logprob a sampled token
has under softmax(logits / T) (its expectation is minus the sampler's entropy, so a sampler that
favours likely tokens shows a higher mean), the mean length, the share that stopped, and the
reward (rlyard's verifier; a reply cut at the budget scores 0, as in bench/vs_trl.py).

Why: bench/vs_trl.py's rlyard side reached lower held-out accuracy than TRL's while its policy
entropy fell earlier (docs/benchmarks.md). If the two samplers agree within their standard
errors, the sampler is not where the runs part.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
from rlyard.engines import HFEngine
from rlyard.envs import get_family
from rlyard.export import run_checkpoint
from rlyard.models import load_model, load_tokenizer
from rlyard.orchestrate.rollout import render_prompt
from rlyard.orchestrate.setup import stop_tokens
from rlyard.train.logprobs import continuation_logprobs
from rlyard.types import SamplingParams
from provenance import commit, scrub  # bench/ is on sys.path when a script runs
from vs_trl import ARITH_OPTIONS, merged_policy
from vs_trl_hybrid import GenerateEngine


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", help="a finished rlyard run of bench/vs_trl.py (default: the embedded base model)")
    parser.add_argument("--prompts", type=int, default=32, help="held-out prompts (default 32)")
    parser.add_argument("--samples", type=int, default=16, help="completions per prompt and side (default 16)")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", default="bench/results/sampler_check.json")
    return parser.parse_args(argv)


def policy(run: str | None):
    if run is None:
        return load_model("embedded").eval(), "embedded"
    config, checkpoint = run_checkpoint(Path(run))
    return merged_policy(config, checkpoint), config.model.name


def rlyard_samples(model, tokenizer, prompts, args, stops) -> list[list[int]]:
    engine = HFEngine(model, tokenizer.pad_token_id)
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens, stop_token_ids=stops, seed=args.seed)
    return [c.token_ids for group in engine.generate(prompts, params, n=args.samples) for c in group]


def generate_samples(model, tokenizer, prompts, args, stops) -> list[list[int]]:
    """transformers' generate as TRL 1.16's GRPOTrainer calls it (vs_trl_hybrid.GenerateEngine),
    one prompt's samples a batch, from the global RNG seeded once."""
    engine = GenerateEngine(model, tokenizer.pad_token_id)
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens, stop_token_ids=stops)
    torch.manual_seed(args.seed)
    return [c.token_ids for prompt in prompts for c in engine.generate([prompt], params, n=args.samples)[0]]


def measure(model, tokenizer, family, tasks, prompts, samples, args, stops) -> dict:
    """One scorer for both sides: the teacher-forced logprob of every sampled token at T."""
    sums, lengths, stopped, rewards = [], [], [], []
    with torch.no_grad():
        for p, prompt in enumerate(prompts):
            group = samples[p * args.samples:(p + 1) * args.samples]
            scored = continuation_logprobs(model, prompt, group, [[1] * len(ids) for ids in group], args.temperature, with_entropy=False)
            for ids, token_logprobs in zip(group, scored.logprobs):
                sums.append(float(token_logprobs.sum()))
                finished = bool(ids) and ids[-1] in stops
                lengths.append(len(ids))
                stopped.append(float(finished))
                rewards.append(family.verify(tokenizer.decode(ids, skip_special_tokens=True), tasks[p]).value if finished else 0.0)
    mean = sum(sums) / sum(lengths)  # per token; its standard error treats each sample as one draw (a ratio estimate)
    se = math.sqrt(sum((s - mean * n) ** 2 for s, n in zip(sums, lengths))) / sum(lengths)
    return {"token_logprob_mean": mean, "token_logprob_se": se, "tokens": sum(lengths), "length_mean": statistics.fmean(lengths),
            "stopped": statistics.fmean(stopped), "reward_mean": statistics.fmean(rewards), "reward_se": statistics.stdev(rewards) / math.sqrt(len(rewards)),
            "samples": len(samples)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    model, name = policy(args.run)
    tokenizer, family = load_tokenizer(name), get_family("arith")
    tasks = family.make_tasks("eval", args.prompts, 0, **ARITH_OPTIONS)
    prompts = [render_prompt(tokenizer, task.prompt) for task in tasks]
    stops = stop_tokens(tokenizer)
    results = {}
    for side, draw in (("rlyard_engine", rlyard_samples), ("transformers_generate", generate_samples)):
        started = time.perf_counter()
        samples = draw(model, tokenizer, prompts, args, stops)
        results[side] = measure(model, tokenizer, family, tasks, prompts, samples, args, stops)
        results[side]["seconds"] = time.perf_counter() - started
        r = results[side]
        print(f"{side:>22}: token logprob {r['token_logprob_mean']:.4f} +- {r['token_logprob_se']:.4f} ({r['tokens']} tokens), "
              f"length {r['length_mean']:.2f}, stopped {r['stopped']:.1%}, reward {r['reward_mean']:.3f} +- {r['reward_se']:.3f}",
              flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(scrub({"commit": commit(), "settings": vars(args), "results": results}), indent=2))
    print(f"[sampler_check] wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
