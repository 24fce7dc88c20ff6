"""GRPO in one screen, built from rlyard's parts: sample, grade, centre, train, push weights.

    python examples/minimal_grpo.py --steps 20

This is the sync loop of `rlyard train` without config files, checkpoints or sinks; read it
first to see the whole algorithm, then rlyard/orchestrate/sync_loop.py for the full version
(rlyard/orchestrate/entry.py is where every run starts: it picks that loop, the async one or Ray).
"""
from __future__ import annotations

import argparse
import statistics

import torch

from rlyard.algos import grpo
from rlyard.config import AlgoConfig
from rlyard.engines import HFEngine
from rlyard.envs import get_family
from rlyard.models import add_lora, load_model, load_tokenizer
from rlyard.models.lora import merged_weights
from rlyard.orchestrate.rollout import rollout
from rlyard.train import Learner
from rlyard.types import SamplingParams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded", help="HF id, local path, or 'embedded'")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--lr", type=float, default=5e-4)
    args = parser.parse_args()
    torch.manual_seed(0)

    tokenizer = load_tokenizer(args.model)
    policy = add_lora(load_model(args.model), rank=16, alpha=32, dropout=0.0,
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    engine = HFEngine(load_model(args.model), tokenizer.pad_token_id)  # sampling copy, gets merged weights
    learner = Learner(policy, AlgoConfig(lr=args.lr), temperature=0.7, micro_batch_size=8)
    family = get_family("arith")
    tasks = family.make_tasks("train", args.steps * args.prompts, seed=0)
    params = SamplingParams(temperature=0.7, max_new_tokens=16, stop_token_ids=(tokenizer.eos_token_id,))

    for step in range(args.steps):
        batch_tasks = tasks[step * args.prompts : (step + 1) * args.prompts]
        # 1. sample n completions per prompt (tokens + behaviour logprobs) and grade them
        batch = rollout(engine, tokenizer, family, batch_tasks, args.n, params, f"{step}/", truncated_reward=0.0)
        # 2. GRPO: each reward minus its group's mean, over the group's std
        rewards = torch.tensor([t.reward for t in batch])
        advantages = grpo(rewards, [t.group_id for t in batch]).tolist()
        # 3. one PPO-clip step over the sampled tokens, then give the engine the new weights
        metrics = learner.train_step(batch, advantages, step)
        engine.update_weights(step + 1, merged_weights(policy))
        print(f"step {step + 1:3d}  reward {statistics.fmean(rewards.tolist()):.3f}  "
              f"entropy {metrics['loss/entropy']:.3f}  grad_norm {metrics['loss/grad_norm']:.3f}")


if __name__ == "__main__":
    main()
