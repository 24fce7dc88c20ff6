"""rlyard's whole training loop in lockstep with one TRL run: same start, same random draws.

    python bench/trl_lockstep.py --seed 0        # 30 steps of bench/vs_trl.py's settings, float32
    python bench/trl_lockstep.py --seed 0 --variant zero_grad_steps --trl-record trl0.pt   # keep TRL's run, reuse it

bench/trl_replay.py showed that rlyard's learner takes TRL's step on TRL's batches, and
bench/vs_trl_hybrid.py that rlyard's loop sampling with TRL's sampler still ends where rlyard's
own runs end, below TRL's. This script removes the last differences between the two loops that
are not code: the starting adapter and the random numbers. TRL's GRPOTrainer runs first, and the
script records its initial LoRA weights, the torch RNG state at each of its `generate` calls, its
completions, and its weights after each step. Then rlyard's own loop (`train`, task stream,
rewards, advantages, learner) runs from TRL's initial adapter, sampling with `generate` on the
learner's model, as TRL calls it, from TRL's recorded RNG state at each step.

If the two loops compute the same thing, step k's 32 completions are TRL's (a row can part only
where float rounding moves a draw across a token boundary) and the weights stay within rounding
of TRL's; the first step where they do not is where the loops differ. Both final policies are
scored as bench/vs_trl.py scores them (merged, float32, greedy, 200 held-out tasks).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
import rlyard.orchestrate.setup as setup
from rlyard.envs import get_family
from rlyard.models import load_tokenizer
from rlyard.orchestrate.entry import train
from rlyard.types import Completion, SamplingParams
from provenance import commit, scrub  # bench/ is on sys.path when a script runs
import trl_replay
from trl_replay import lora_weights
from vs_trl import held_out_accuracy, parse_args, run_config, train_tasks
from vs_trl_hybrid import GenerateEngine
from vs_trl_variants import VARIANTS, apply


def run_trl(args, family, tokenizer, tasks) -> dict:
    """TRL's run as bench/trl_replay.py records it, kept to what rlyard needs to follow it (no
    trainer: it is saved with --trl-record), with TRL's end tokens and its own held-out score."""
    run = trl_replay.run_trl(args, tokenizer, family, tasks)
    trainer = run.pop("trainer")
    run["batches"] = [[ids for _index, ids, _reward in batch] for batch in run["batches"]]
    run["eos_token_ids"] = list(trainer.eos_token_ids)
    run["accuracy"] = held_out_accuracy(trainer.model.merge_and_unload().eval(), tokenizer, family, args)
    return run


class LockstepEngine(GenerateEngine):
    """GenerateEngine drawing each training batch from TRL's RNG state of that step, with TRL's
    end tokens; it keeps every batch it sampled and the learner's LoRA weights after each push."""

    def __init__(self, model, pad_token_id: int, rng_states: list, eos_token_ids: list[int]):
        super().__init__(model, pad_token_id)
        self.rng_states, self.eos_token_ids = rng_states, tuple(eos_token_ids)
        self.batches: list[list[list[int]]] = []
        self.weights: list[dict] = []

    def generate(self, prompts: list[list[int]], params: SamplingParams, n: int = 1) -> list[list[Completion]]:
        if params.temperature <= 0:
            return super().generate(prompts, params, n)
        torch.set_rng_state(self.rng_states[len(self.batches)])
        groups = super().generate(prompts, replace(params, seed=None, stop_token_ids=self.eos_token_ids), n)
        self.batches.append([c.token_ids for group in groups for c in group])
        return groups

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        super().update_weights(version, state_dict)
        self.weights.append(lora_weights(self.model))


def run_rlyard(args, trl: dict, run_dir: Path) -> LockstepEngine:
    """rlyard's `train` from TRL's initial adapter, sampling through LockstepEngine."""
    build_policy = setup.policy_model
    engines: list[LockstepEngine] = []

    def policy_from_trl_start(model_config, adapter: bool = True):
        model = build_policy(model_config, adapter)
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in trl["weights"][0].items():
                params[name].copy_(value)
        return model

    def engine(config, model, tokenizer, train_mode):
        engines.append(LockstepEngine(model, tokenizer.pad_token_id, trl["rng_states"], trl["eos_token_ids"]))
        return engines[-1]

    setup.policy_model, setup.config_engine = policy_from_trl_start, engine
    args.rlyard_set = ["eval.size=0", "eval.at_start=false"]  # both sides are scored below, alike
    train(run_config(args, run_dir), run_dir)
    return engines[0]


def compare(trl: dict, ours: LockstepEngine) -> list[dict]:
    rows = []
    print(f"{'step':>4} {'same completions':>17} {'max |rlyard - TRL| weight':>26}")
    for step, (theirs, mine) in enumerate(zip(trl["batches"], ours.batches)):
        same = sum(a == b for a, b in zip(theirs, mine))
        after = ours.weights[step] if step < len(ours.weights) else None
        gap = None if after is None else max(float((after[k] - trl["weights"][step + 1][k]).abs().max()) for k in after)
        rows.append({"step": step + 1, "same_completions": same, "completions": len(theirs), "max_abs_weight_gap": gap})
        print(f"{step + 1:>4} {same:>10}/{len(theirs):<6} {'-' if gap is None else format(gap, '.3e'):>26}", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--variant", choices=VARIANTS, default="none",
                        help="rlyard's side with one of TRL's behaviours swapped in (bench/vs_trl_variants.py)")
    parser.add_argument("--trl-record", type=Path,
                        help="TRL's run is kept here (torch.save) and read back when the file exists, so that "
                             "rlyard's variants follow one TRL run without running it again")
    parser.add_argument("--out", default="bench/results/trl_lockstep.json")
    own = parser.parse_args()
    args = parse_args(["--steps", str(own.steps), "--seed", str(own.seed)])  # bench/vs_trl.py's settings
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    family, tokenizer = get_family("arith"), load_tokenizer(args.model)
    if own.trl_record and own.trl_record.exists():
        trl = torch.load(own.trl_record, weights_only=False)
    else:
        trl = run_trl(args, family, tokenizer, train_tasks(args, family))
        if own.trl_record:
            torch.save(trl, own.trl_record)
    apply(own.variant)
    print(f"[trl_lockstep] TRL: {len(trl['batches'])} batches, held-out {trl['accuracy']:.1%}; end tokens {trl['eos_token_ids']}", flush=True)
    engine = run_rlyard(args, trl, Path(tempfile.mkdtemp(prefix="trl_lockstep-")))
    rows = compare(trl, engine)
    accuracy = held_out_accuracy(engine.model.merge_and_unload().eval(), tokenizer, family, args)
    first = next((r["step"] for r in rows if r["same_completions"] < r["completions"]), None)
    print(f"[trl_lockstep] held-out: TRL {trl['accuracy']:.1%}, rlyard ({own.variant}) in lockstep {accuracy:.1%}; first step with a "
          f"different completion: {first}; same completions over the run "
          f"{statistics.fmean(r['same_completions'] / r['completions'] for r in rows):.1%}")
    out = Path(own.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(scrub({"commit": commit(), "settings": vars(args), "variant": own.variant, "eos_token_ids": trl["eos_token_ids"],
                                     "trl_accuracy": trl["accuracy"], "rlyard_lockstep_accuracy": accuracy,
                                     "first_step_with_a_different_completion": first, "steps": rows}), indent=2))
    print(f"[trl_lockstep] wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
