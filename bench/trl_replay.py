"""Replay TRL's exact GRPO batches through rlyard's learner and compare the LoRA weights step by step.

    python bench/trl_replay.py            # 4 TRL steps (about 2 minutes on 2 cores)
    python bench/trl_replay.py --steps 8

TRL's GRPOTrainer runs `bench/vs_trl.py`'s settings (seed 0). A callback saves the LoRA weights
before training and after every step, and the reward function records every completion. Then
rlyard's `Learner` starts from TRL's initial LoRA weights. For each step it trains on TRL's
completions (rlyard's GRPO advantages, its own on-policy logprobs), and then compares its
weights with TRL's after that step. Each step starts again from TRL's weights, so the
differences do not add up.

This separates the update from the sampling: if the weights agree, the two learners do the
same step given the same samples.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
from rlyard.algos import grpo
from rlyard.config import DEFAULT_LORA_TARGETS, AlgoConfig
from rlyard.envs import get_family
from rlyard.models import add_lora, load_model, load_tokenizer
from rlyard.orchestrate.rollout import render_prompt
from rlyard.orchestrate.setup import stop_tokens
from rlyard.train import Learner
from rlyard.train.logprobs import continuation_logprobs
from rlyard.types import Trajectory

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_trl

SETTINGS = {"model": "embedded", "prompts": 4, "n": 8, "max_new_tokens": 32, "lr": 5e-4, "temperature": 0.7, "lora_rank": 16,
            "lora_alpha": 32, "micro_batch": 8, "truncated_reward": 0.0, "seed": 0, "threads": 2, "eval_size": 0}


def lora_weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if "lora_" in name}


def run_trl(args, tokenizer, family, tasks):
    """TRL's steps, returning the completions of each step and the LoRA weights before / after each."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    stop_ids = set(stop_tokens(tokenizer))
    batches: list[list[tuple[int, list[int], float]]] = []
    weights: list[dict[str, torch.Tensor]] = []

    def reward(prompts, completions, completion_ids, task_index, **_):
        rewards = []
        for ids, index in zip(completion_ids, task_index):
            truncated = len(ids) >= args.max_new_tokens and not stop_ids & set(ids)
            rewards.append(0.0 if truncated else family.verify(tokenizer.decode(ids, skip_special_tokens=True), tasks[index]).value)
        batches.append([(index, list(ids), r) for ids, index, r in zip(completion_ids, task_index, rewards)])
        return rewards

    class Snapshots(TrainerCallback):
        def on_train_begin(self, _args, state, control, model=None, **kw):
            weights.append(lora_weights(model))

        def on_step_end(self, _args, state, control, model=None, **kw):
            weights.append(lora_weights(model))

    torch.manual_seed(args.seed)
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl_replay-"), use_cpu=True, bf16=False, seed=args.seed, max_steps=args.steps,
        per_device_train_batch_size=args.micro_batch, gradient_accumulation_steps=args.prompts * args.n // args.micro_batch,
        num_generations=args.n, max_completion_length=args.max_new_tokens, temperature=args.temperature, learning_rate=args.lr,
        lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0, beta=0.0, epsilon=0.2, loss_type="dapo",
        scale_rewards="group", num_iterations=1, shuffle_dataset=False, gradient_checkpointing=False, logging_steps=1,
        report_to="none", save_strategy="no", disable_tqdm=True,
    )
    dataset = Dataset.from_list([{"prompt": task.prompt, "task_index": i} for i, task in enumerate(tasks)])
    lora = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0, target_modules=list(DEFAULT_LORA_TARGETS),
                      task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=load_model(args.model), reward_funcs=[reward], args=config, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=lora, callbacks=[Snapshots()])
    trainer.train()
    return batches, weights


def replay(args, tokenizer, tasks, batches, weights) -> None:
    model = add_lora(load_model(args.model), args.lora_rank, args.lora_alpha, 0.0, list(DEFAULT_LORA_TARGETS))
    params = dict(model.named_parameters())
    learner = Learner(model, AlgoConfig(lr=args.lr), args.temperature, args.micro_batch, args.max_new_tokens)
    print(f"{'step':>4} {'reward':>7} {'grad norm':>10} {'max |rlyard - TRL|':>19} {'largest TRL move':>17}")
    for step, rows in enumerate(batches):
        with torch.no_grad():  # start each step from TRL's weights
            for name, value in weights[step].items():
                params[name].copy_(value)
        model.eval()
        batch = []
        for index, ids, reward in rows:
            prompt = render_prompt(tokenizer, tasks[index].prompt)
            with torch.no_grad():
                logprobs = continuation_logprobs(model, prompt, [ids], [[1] * len(ids)], args.temperature, with_entropy=False).logprobs[0]
            batch.append(Trajectory(
                task_id=str(index), group_id=f"{step}:{index}", token_ids=prompt + ids, loss_mask=[0] * len(prompt) + [1] * len(ids),
                behaviour_logprobs=[0.0] * len(prompt) + logprobs.tolist(), policy_versions=[step] * (len(prompt) + len(ids)), reward=reward,
            ))
        advantages = grpo(torch.tensor([t.reward for t in batch]), [t.group_id for t in batch])
        metrics = learner.train_step(batch, advantages.tolist(), step=step)
        ours, theirs, before = lora_weights(model), weights[step + 1], weights[step]
        gap = max(float((ours[name] - theirs[name]).abs().max()) for name in ours)
        moved = max(float((theirs[name] - before[name]).abs().max()) for name in ours)
        mean_reward = sum(t.reward for t in batch) / len(batch)
        print(f"{step + 1:>4} {mean_reward:>7.3f} {metrics['loss/grad_norm']:>10.4f} {gap:>19.3e} {moved:>17.3e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="TRL steps to record and replay (default 4)")
    args = argparse.Namespace(**SETTINGS, **vars(parser.parse_args()))
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    family, tokenizer = get_family("arith"), load_tokenizer(args.model)
    tasks = vs_trl.train_tasks(args, family)
    batches, weights = run_trl(args, tokenizer, family, tasks)
    replay(args, tokenizer, tasks, batches, weights)


if __name__ == "__main__":
    main()
