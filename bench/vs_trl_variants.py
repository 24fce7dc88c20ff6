"""vs_trl.py's rlyard side with one of TRL's behaviours swapped in, to trace the held-out gap.

    python bench/vs_trl_variants.py --variant zero_grad_steps --seeds 0 1 2 --json ...
    python bench/vs_trl_variants.py --variant multinomial --seeds 0 1 2 --json ...

Each run is `bench/vs_trl.py --only rlyard --seed N` (30 steps, then the same 200 held-out
tasks), in its own process, with one change:

- `zero_grad_steps`: AdamW steps on a batch with no signal (every group's rewards equal: zero
  gradients), as TRL does, where rlyard skips the step;
- `multinomial`: the engine draws each token with `torch.multinomial` over softmax(logits / T),
  as transformers' `generate` does, instead of rlyard's inverse-CDF draw (one uniform a row).

Either change alone is a hypothesis for why TRL's held-out accuracy was above rlyard's on seeds
0 to 2 (docs/benchmarks.md); `none` runs the unchanged side for comparison.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
VARIANTS = ("none", "zero_grad_steps", "multinomial")


def apply(variant: str) -> None:
    if variant == "zero_grad_steps":
        from rlyard.train.learner import Learner

        skipping_step = Learner._step

        def step_on_zero_gradients(self, lr):
            for group in self.optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        param.grad = torch.zeros_like(param)
            return skipping_step(self, lr)

        Learner._step = step_on_zero_gradients
    elif variant == "multinomial":
        import rlyard.engines.hf as hf

        def sample(logits, params, generator):
            logits = logits.float().cpu()
            if params.temperature <= 0:
                chosen = logits.argmax(dim=-1)
                return chosen, torch.log_softmax(logits, dim=-1).gather(-1, chosen[:, None]).squeeze(-1)
            logprobs = torch.log_softmax(logits / params.temperature, dim=-1)
            chosen = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
            return chosen, logprobs.gather(-1, chosen[:, None]).squeeze(-1)

        hf.sample = sample


def one_seed(variant: str, seed: int) -> dict:
    import vs_trl

    apply(variant)
    args = vs_trl.parse_args(["--seed", str(seed), "--only", "rlyard"])
    started = time.perf_counter()
    run = vs_trl.run_rlyard(args)
    rewards = [step["reward"] for step in run["steps"]]
    return {"variant": variant, "seed": seed, "final_accuracy": run["final_accuracy"], "base_accuracy": run["base_accuracy"],
            "mean_training_reward": statistics.fmean(rewards), "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--json", help="write the runs and their mean / sd here")
    parser.add_argument("--child-seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_seed is not None:
        print("RESULT " + json.dumps(one_seed(args.variant, args.child_seed)), flush=True)
        return
    runs = []
    for seed in args.seeds:  # a fresh process a seed, as vs_trl.py's own sweep
        out = subprocess.run([sys.executable, __file__, "--variant", args.variant, "--child-seed", str(seed)],
                             capture_output=True, text=True, check=True).stdout
        runs.append(json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:]))
        print(f"[vs_trl_variants] {args.variant} seed {seed}: held-out {runs[-1]['final_accuracy']:.1%}", flush=True)
    accuracies = [run["final_accuracy"] for run in runs]
    summary = {"mean": statistics.fmean(accuracies), "sd": statistics.stdev(accuracies) if len(runs) > 1 else 0.0}
    print(f"{args.variant}: held-out mean {summary['mean']:.1%}, sd {summary['sd']:.1%} over seeds {args.seeds}")
    if args.json:
        from provenance import commit
        from vs_trl import machine

        Path(args.json).write_text(json.dumps({"variant": args.variant, "commit": commit(), "machine": machine(),
                                               "runs": runs, "accuracy": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
