"""rlyard's training loop sampling with TRL's sampler: where do bench/vs_trl.py's two sides part?

    python bench/vs_trl_hybrid.py --seeds 0 1 2        # bench/vs_trl.py's settings, float32
    python bench/vs_trl_hybrid.py --seeds 0 1 2 --variant zero_grad_steps   # and TRL's steps on zero gradients

bench/vs_trl.py's float32 runs end about 9 points below TRL's held-out accuracy on a 2-core AMD
machine, while each half, taken alone, matches TRL's: the update (bench/trl_replay.py: rlyard's
learner on TRL's recorded batches) and the sampler's distribution at one fixed policy
(bench/sampler_check.py). This script closes the loop with one part swapped: rlyard's whole
run (task stream, rewards, advantages, learner, weights) with transformers' `generate`, called as
TRL 1.16's GRPOTrainer calls it, as the engine. It samples from the learner's own LoRA model,
as TRL does, instead of rlyard's merged copy. If these runs land at TRL's accuracy, the gap is in
rlyard's engine in the loop; if they land at rlyard's, it is in the rest of rlyard's loop.
Scored as bench/vs_trl.py scores both sides (merged float32, greedy, 200 held-out tasks).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
import rlyard.orchestrate.setup as setup
from rlyard.engines.base import fold_seed
from rlyard.types import Completion, SamplingParams
from provenance import commit, scrub  # bench/ is on sys.path when a script runs
from vs_trl import machine, parse_args, run_rlyard
from vs_trl_variants import VARIANTS, apply


class GenerateEngine:
    """transformers' `generate` on the learner's model, as TRL's GRPOTrainer samples: one batch
    of every prompt's n copies (left-padded), top_k 0, top_p 1, the stop tokens as eos. Logprobs
    are log-softmax of the scores `generate` sampled from (logits / T), as rlyard's engine reports."""

    def __init__(self, model, pad_token_id: int):
        self.model, self.pad_token_id, self.policy_version = model, pad_token_id, 0

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        self.policy_version = version  # the learner's model is the policy already

    def generate(self, prompts: list[list[int]], params: SamplingParams, n: int = 1) -> list[list[Completion]]:
        from transformers import GenerationConfig

        rows = [prompt for prompt in prompts for _ in range(n)]
        width = max(map(len, rows))
        ids = torch.tensor([[self.pad_token_id] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        sample = params.temperature > 0
        config = GenerationConfig(max_new_tokens=params.max_new_tokens, do_sample=sample, pad_token_id=self.pad_token_id,
                                  eos_token_id=list(params.stop_token_ids), temperature=params.temperature if sample else None,
                                  top_p=1.0 if sample else None, top_k=0 if sample else None, min_p=None,
                                  repetition_penalty=1.0, disable_compile=True, output_scores=True, return_dict_in_generate=True)
        if params.seed is not None:
            torch.manual_seed(fold_seed(params.seed, "generate", len(rows)))
        training = self.model.training
        self.model.eval()
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        self.model.train(training)
        sampled = out.sequences[:, width:]
        logprobs = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)  # rows x steps x vocab
        chosen = logprobs.gather(-1, sampled[:, : logprobs.shape[1], None]).squeeze(-1)
        completions = []
        for row, row_logprobs in zip(sampled.tolist(), chosen.tolist()):
            cut = next((i + 1 for i, t in enumerate(row) if t in params.stop_token_ids), None)
            end = cut or min(len(row), params.max_new_tokens)
            completions.append(Completion(row[:end], row_logprobs[:end], "stop" if cut else "length", self.policy_version))
        return [completions[i * n:(i + 1) * n] for i in range(len(prompts))]


def with_generate_engine():
    """rlyard's setup, building GenerateEngine where it would build its own engine."""
    setup.config_engine = lambda config, model, tokenizer, train: GenerateEngine(model, tokenizer.pad_token_id)


def write(results: dict, out: Path, seeds_left: int) -> None:
    """The file after every seed (atomically), so that a sweep stopped midway keeps what it measured;
    `complete` says whether every seed asked for is in it."""
    accuracies = [run["final_accuracy"] for run in results["seeds"].values()]
    results["accuracy_mean"] = statistics.fmean(accuracies)
    results["accuracy_sd"] = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
    results["complete"] = seeds_left == 0
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(scrub(results), indent=2))
    partial.replace(out)


def main(argv: list[str] | None = None) -> int:
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--variant", choices=VARIANTS, default="none",
                     help="one of TRL's behaviours on rlyard's side too (bench/vs_trl_variants.py)")
    extra, rest = own.parse_known_args(argv)
    args = parse_args(rest)
    apply(extra.variant)
    if args.out == "bench/results/vs_trl.json":  # vs_trl.py's default: never overwrite its figures
        args.out = "bench/results/vs_trl_hybrid.json"
    args.rlyard_set = ["eval.at_start=false", *args.rlyard_set]  # the base model's score is vs_trl.py's
    with_generate_engine()
    seeds = args.seeds or [args.seed]
    results: dict = {"settings": vars(args), "variant": extra.variant, "machine": machine(), "commit": commit(), "seeds": {}}
    for seed in seeds:
        args.seed = seed
        started = time.perf_counter()
        torch.manual_seed(seed)
        run = run_rlyard(args)
        steps = run.pop("steps")
        run |= {"rewards": [s["reward"] for s in steps], "s_per_step": statistics.fmean(s["seconds"] for s in steps[1:]),
                "wall_seconds": time.perf_counter() - started}
        results["seeds"][seed] = run
        print(f"[vs_trl_hybrid] seed {seed}: held-out {run['final_accuracy']:.1%}, {run['s_per_step']:.2f} s/step, "
              f"mean reward {statistics.fmean(run['rewards']):.3f}", flush=True)
        write(results, Path(args.out), seeds_left=len(seeds) - len(results["seeds"]))
    print(f"[vs_trl_hybrid] mean {results['accuracy_mean']:.1%}, sd {results['accuracy_sd']:.1%} over seeds {seeds}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
