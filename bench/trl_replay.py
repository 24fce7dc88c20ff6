"""Replay TRL's exact GRPO batches through rlyard's learner and compare the LoRA weights step by step.

    python bench/trl_replay.py            # 4 TRL steps (about 2 minutes on 2 cores)
    python bench/trl_replay.py --steps 8 --seed 3     # writes bench/results/trl_replay.json
    python bench/trl_replay.py --steps 12 --chain --out ...   # rlyard carries its own weights from step 1 on

TRL's GRPOTrainer runs `bench/vs_trl.py`'s settings (its defaults; --seed, default 0). A
callback saves the LoRA weights before training and after every step, and the reward function
records every completion. Then rlyard's `Learner` starts from TRL's initial LoRA weights. For
each step it trains on TRL's completions (rlyard's GRPO advantages, its own on-policy logprobs),
and then compares its weights with TRL's after that step. Each step starts again from TRL's
weights, so the differences do not add up; with --chain only the first does, so they may.

This separates the update from the sampling: if the weights agree, the two learners do the
same step given the same samples.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
from rlyard.algos import grpo
from rlyard.config import DEFAULT_LORA_TARGETS, training_algo
from rlyard.envs import get_family
from rlyard.models import add_lora, load_model, load_tokenizer
from rlyard.orchestrate.rollout import render_prompt
from rlyard.train import Learner
from rlyard.train.logprobs import continuation_logprobs
from rlyard.types import Trajectory

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_trl
from provenance import commit, scrub


def lora_weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if "lora_" in name}


def run_trl(args, tokenizer, family, tasks) -> dict:
    """TRL's run, recorded: each step's completions (task index, ids, reward), the LoRA weights
    before training and after each step, the torch RNG state at each `generate` call (what
    bench/trl_lockstep.py replays), and the trainer itself."""
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    run: dict = {"batches": [], "weights": [], "rng_states": []}

    class Recording(GRPOTrainer):
        def _generate_single_turn(self, *a, **k):
            run["rng_states"].append(torch.get_rng_state())
            return super()._generate_single_turn(*a, **k)

    def record(task_indices, completion_ids, rewards):
        run["batches"].append([(index, list(ids), r) for index, ids, r in zip(task_indices, completion_ids, rewards)])

    class Snapshots(TrainerCallback):
        def on_train_begin(self, _args, state, control, model=None, **kw):
            run["weights"].append(lora_weights(model))

        def on_step_end(self, _args, state, control, model=None, **kw):
            run["weights"].append(lora_weights(model))

    torch.manual_seed(args.seed)
    run["trainer"] = Recording(model=load_model(args.model), callbacks=[Snapshots()],
                               **vs_trl.trl_setup(args, family, tokenizer, tasks, on_rewards=record))
    run["trainer"].train()
    return run


def replay(args, tokenizer, tasks, batches, weights, chain: bool = False) -> list[dict]:
    """Each step from TRL's weights before it, or with `chain` only the first: then rlyard's weights
    are its own after every step, and the gap shows whether rounding differences grow over a run."""
    model = add_lora(load_model(args.model), args.lora_rank, args.lora_alpha, 0.0, list(DEFAULT_LORA_TARGETS))
    params = dict(model.named_parameters())
    learner = Learner(model, training_algo(vs_trl.run_config(args, Path("unused"))), args.temperature, args.micro_batch, args.max_new_tokens)
    rows_out = []
    print(f"{'step':>4} {'reward':>7} {'grad norm':>10} {'max |rlyard - TRL|':>19} {'largest TRL move':>17}")
    for step, rows in enumerate(batches):
        if step == 0 or not chain:  # start each step (with chain: the first) from TRL's weights
            with torch.no_grad():
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
        rows_out.append({"step": step + 1, "reward_mean": mean_reward, "grad_norm": metrics["loss/grad_norm"],
                         "max_abs_gap": gap, "largest_trl_move": moved})
    return rows_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="TRL steps to record and replay (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chain", action="store_true", help="start only step 1 from TRL's weights, then carry rlyard's own")
    parser.add_argument("--out", default="bench/results/trl_replay.json")
    own = parser.parse_args()
    # bench/vs_trl.py's own defaults, so the replay never drifts from the comparison it explains
    args = vs_trl.parse_args(["--steps", str(own.steps), "--seed", str(own.seed), "--eval-size", "0"])
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    family, tokenizer = get_family("arith"), load_tokenizer(args.model)
    tasks = vs_trl.train_tasks(args, family)
    trl = run_trl(args, tokenizer, family, tasks)
    rows = replay(args, tokenizer, tasks, trl["batches"], trl["weights"], own.chain)
    out = Path(own.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(scrub({"commit": commit(), "settings": vars(args), "chain": own.chain, "steps": rows}), indent=2))
    print(f"[trl_replay] wrote {out}")


if __name__ == "__main__":
    main()
