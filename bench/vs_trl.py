"""TRL's GRPOTrainer and rlyard side by side: same model, task, reward and settings, one invocation.

    pip install -e '.[bench]'          # TRL is a bench-only extra, never a runtime dependency
    python bench/vs_trl.py             # 30 steps each, then a held-out greedy eval of both
    python bench/vs_trl.py --quick     # 2 steps each, 20 eval tasks: a smoke run (~2 min on 2 cores)
    python bench/vs_trl.py --seeds 0 1 2   # both sides once per seed: held-out accuracy mean and spread

Both runs train the embedded SmolLM2-135M-Instruct with LoRA on rlyard's `arith` family
(quickstart options: "What is x+y?", x, y in 10..99). Both see the same prompts in the same
order (rlyard's own task stream, fed to TRL unshuffled), and both optimise the identical reward:
TRL's reward function is rlyard's verifier, with rlyard's `truncated_reward` applied to replies
that hit the token budget. Equal settings: prompts per step, completions per prompt, max
completion tokens, temperature, LoRA rank / alpha / target modules, lr (constant, AdamW,
grad-norm clip 1.0), token-mean PPO-clip loss (TRL: loss_type "dapo") with eps 0.2, no KL,
GRPO advantages over the group std, micro-batches of 8 completions, one optimizer step per
batch, same seed and thread count. TRL's gradient checkpointing (its default) is off, since
it only trades speed for memory; --trl-gradient-checkpointing turns it on.

Precision (--precision, the same for both sides): float32 (the default) everywhere, or `auto`:
bf16 exactly where the CPU has native bf16 (AMX, AVX512-BF16), float32 elsewhere. Under auto
TRL trains with `bf16=True` (transformers' autocast) and samples with the same model; rlyard
runs `model.autocast=auto` (the learner's matmuls) and `rollout.dtype=auto` (the engine's own
bf16 copy of the weights).

Timing: a step is the wall clock from sampling to the optimizer step (TRL: a TrainerCallback
around each optimizer step; rlyard: its `time/step` metric). Generation time is TRL's
`_generate_single_turn` (the `transformers.generate` call) and rlyard's `time/generate`;
"training" is the rest of the step. Means exclude step 1 (warm-up). After training, both
models are evaluated by rlyard's evaluator (greedy, same held-out tasks, same token budget) on a
plain float32 model with the LoRA merged (TRL's trainer model; rlyard's last checkpoint), so the
comparison runs identical code whatever engine rlyard sampled with (the run's own eval, e.g. by
int8 weights, is kept as `final_accuracy_engine`). `--rescore RUN_DIR...` scores finished rlyard
runs of this bench that way.
Prints a side-by-side table and writes everything to --out as JSON.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# OMP_WAIT_POLICY is left as the caller set it. Idle, the default (spinning) OpenMP threads are
# fastest (PASSIVE cost ~25% of decode throughput on 2 idle cores); on 2 cores shared with busy
# processes, spinning collapses (a small matmul ran 50x slower) and OMP_WAIT_POLICY=PASSIVE helps.
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
from rlyard.config import DEFAULT_LORA_TARGETS, RunConfig, apply_overrides
from rlyard.data import run_tasks
from rlyard.engines import HFEngine
from rlyard.envs import get_family
from rlyard.export import run_checkpoint, trained_policy
from rlyard.models import is_peft, load_model, load_tokenizer
from rlyard.observe.metrics import read_metrics
from rlyard.orchestrate.evaluate import evaluate
from rlyard.orchestrate.setup import stop_tokens
from provenance import commit, scrub  # bench/ is on sys.path when a script runs

ARITH_OPTIONS = {"ops": "+", "min_value": 10, "max_value": 99}  # the quickstart's


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The settings of both sides; `argv` (default: the command line) lets other benches reuse them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded", help="HF id or path; default: the embedded SmolLM2-135M-Instruct")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps for each framework (default 30)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 steps, 20 eval tasks")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (default 4)")
    parser.add_argument("--n", type=int, default=8, help="completions per prompt, the GRPO group (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="max completion tokens, training and eval (default 32)")
    parser.add_argument("--lr", type=float, default=5e-4, help="constant learning rate (default 5e-4, the quickstart's)")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--lora-alpha", type=int, default=32)
    parser.add_argument("--micro-batch", type=int, default=8, help="completions per forward/backward (default 8)")
    parser.add_argument("--truncated-reward", type=float, default=0.0,
                        help="reward of a reply cut at the token budget, as in the quickstart (default 0)")
    parser.add_argument("--eval-size", type=int, default=200, help="held-out tasks for the final greedy eval (0 = none)")
    parser.add_argument("--threshold", type=float, default=0.5, help="reward level for 'time to threshold' (default 0.5)")
    parser.add_argument("--window", type=int, default=5, help="moving-average window of the reward curve (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, nargs="+", help="run both sides once per seed and report accuracy mean / sd "
                                                            "(seeds change sampling and the LoRA init, not the prompts)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads for both")
    parser.add_argument("--trl-gradient-checkpointing", action="store_true", help="TRL's default; off for a speed comparison")
    parser.add_argument("--precision", choices=["float32", "auto"], default="float32",
                        help="both sides: float32, or auto = bf16 where the CPU has native bf16 (default float32)")
    parser.add_argument("--only", choices=["trl", "rlyard"], help="run one side only (for debugging)")
    parser.add_argument("--rlyard-set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides for rlyard's side only, e.g. rollout.quantize=int8 (default: none)")
    parser.add_argument("--rescore", nargs="+", metavar="RUN_DIR",
                        help="no training: score the last checkpoint of these rlyard runs of this bench as TRL's model is "
                             "scored (merged, float32, greedy), next to the run's own final eval")
    parser.add_argument("--out", help="JSON results (default bench/results/vs_trl.json; with --rescore, vs_trl_rescored.json)")
    args = parser.parse_args(argv)
    args.out = args.out or f"bench/results/{'vs_trl_rescored' if args.rescore else 'vs_trl'}.json"
    if args.rescore and args.eval_size < 1:
        parser.error("--rescore scores held-out tasks: --eval-size must be at least 1")
    if args.quick:
        args.steps, args.eval_size = 2, min(args.eval_size, 20)
    return args


def train_tasks(args, family):
    """The exact task sequence rlyard's run draws (its TaskStream), so TRL sees the same prompts."""
    config = run_config(args, Path("unused"))
    return run_tasks(family, config.env, config.train.seed, args.steps * args.prompts)


def run_config(args, run_dir: Path) -> RunConfig:
    """rlyard's side: the shared settings, then --rlyard-set overrides (rlyard's own options, e.g.
    rollout.quantize=int8; the comparison then differs in that setting, which the JSON records)."""
    return RunConfig.model_validate(apply_overrides({
        "name": "vs_trl",
        "model": {"name": args.model, "lora": {"rank": args.lora_rank, "alpha": args.lora_alpha},
                  "autocast": "auto" if args.precision == "auto" else "none"},
        "env": {"name": "arith", "options": ARITH_OPTIONS},
        "rollout": {"prompts_per_step": args.prompts, "n": args.n, "temperature": args.temperature,
                    "dtype": "auto" if args.precision == "auto" else None,
                    "max_new_tokens": args.max_new_tokens, "truncated_reward": args.truncated_reward},
        "algo": {"name": "grpo", "lr": args.lr},
        "train": {"steps": args.steps, "seed": args.seed, "threads": args.threads, "micro_batch_size": args.micro_batch},
        "eval": {"size": args.eval_size, "at_start": args.eval_size > 0, "max_new_tokens": args.max_new_tokens},
        "output": {"run_dir": str(run_dir), "checkpoint_every": 0, "progress": False, "plot": False},
    }, list(getattr(args, "rlyard_set", None) or [])))


def held_out_accuracy(model, tokenizer, family, args) -> float | None:
    """Both sides' final score: a plain float32 model (LoRA merged) decoded greedily by rlyard's
    evaluator, so that a setting of one side's sampler (e.g. rlyard's int8 engine) never scores it."""
    if not args.eval_size:
        return None
    tasks = family.make_tasks("eval", args.eval_size, 0, **ARITH_OPTIONS)
    engine = HFEngine(model, tokenizer.pad_token_id)
    return evaluate(engine, tokenizer, family, tasks, args.max_new_tokens, stop_tokens(tokenizer))["accuracy"]


def grpo_config(output_dir: str, seed: int, steps: int, micro_batch: int, episodes: int, n: int, temperature: float,
                lr: float, gradient_checkpointing: bool = False, bf16: bool = False, **extra):
    """TRL's GRPOConfig as both TRL benches run it: one optimizer step per `episodes` completions in
    micro-batches, constant lr, AdamW without weight decay, clip 1.0, no KL, PPO-clip 0.2 with
    token-mean loss ("dapo"), group-std advantages, prompts in the given order, CPU, float32
    unless `bf16` (transformers' CPU autocast)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=output_dir, use_cpu=True, bf16=bf16, seed=seed, max_steps=steps, per_device_train_batch_size=micro_batch,
        gradient_accumulation_steps=episodes // micro_batch, num_generations=n, temperature=temperature,
        learning_rate=lr, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0,
        beta=0.0, epsilon=0.2, loss_type="dapo", scale_rewards="group", num_iterations=1,
        shuffle_dataset=False, gradient_checkpointing=gradient_checkpointing,
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, **extra,
    )


def trl_bf16(args) -> bool:
    """--precision auto gives TRL bf16 exactly where rlyard's auto would pick it (native bf16);
    float32 for callers whose settings have no --precision (bench/trl_replay.py)."""
    from rlyard.models.loading import native_bf16

    return getattr(args, "precision", "float32") == "auto" and native_bf16("cpu")[0]


def trl_setup(args, family, tokenizer, tasks, on_rewards=None) -> dict:
    """The GRPOTrainer arguments both TRL benches share: reward function, config, dataset, LoRA.

    The reward is rlyard's verifier on rlyard's decoding of the reply; a reply cut at the budget
    gets --truncated-reward. `on_rewards(task_indices, completion_ids, rewards)` sees each batch.
    """
    from datasets import Dataset
    from peft import LoraConfig

    stop_ids = set(stop_tokens(tokenizer))

    def arith_reward(prompts, completions, completion_ids, task_index, **_):
        rewards = []
        for ids, index in zip(completion_ids, task_index):
            reward = family.verify(tokenizer.decode(ids, skip_special_tokens=True), tasks[index]).value
            truncated = len(ids) >= args.max_new_tokens and not stop_ids & set(ids)
            rewards.append(args.truncated_reward if truncated and args.truncated_reward is not None else reward)
        if on_rewards is not None:
            on_rewards(task_index, completion_ids, rewards)
        return rewards

    config = grpo_config(tempfile.mkdtemp(prefix="vs_trl-"), args.seed, args.steps, args.micro_batch, args.prompts * args.n,
                         args.n, args.temperature, args.lr, args.trl_gradient_checkpointing, trl_bf16(args),
                         max_completion_length=args.max_new_tokens)
    dataset = Dataset.from_list([{"prompt": task.prompt, "task_index": i} for i, task in enumerate(tasks)])
    lora = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0,
                      target_modules=list(DEFAULT_LORA_TARGETS), task_type="CAUSAL_LM")
    return {"reward_funcs": [arith_reward], "args": config, "train_dataset": dataset, "processing_class": tokenizer,
            "peft_config": lora}


def timed_grpo(steps: list[dict]):
    """A GRPOTrainer subclass that times its generation calls (every turn of a tool-calling
    episode is one), and a callback that appends each optimizer step's seconds, generation
    seconds, mean reward and tool calls an episode (when TRL logs them) to `steps`."""
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        generate_seconds, calls, sampled_tokens = 0.0, 0, []

        def _generate_single_turn(self, *a, **k):
            started = time.perf_counter()
            completion_ids, logprobs = super()._generate_single_turn(*a, **k)
            TimedGRPOTrainer.generate_seconds += time.perf_counter() - started
            TimedGRPOTrainer.calls += 1
            TimedGRPOTrainer.sampled_tokens.append(sum(len(c) for c in completion_ids))
            return completion_ids, logprobs

    class StepTimer(TrainerCallback):
        def on_step_begin(self, _args, state, control, **kw):
            self.started, self.generate_before = time.perf_counter(), TimedGRPOTrainer.generate_seconds

        def on_step_end(self, _args, state, control, **kw):
            steps.append({"step": state.global_step, "seconds": time.perf_counter() - self.started,
                          "generate_seconds": TimedGRPOTrainer.generate_seconds - self.generate_before})

        def on_log(self, _args, state, control, logs=None, **kw):
            if logs and "reward" in logs and steps and steps[-1]["step"] == state.global_step:
                steps[-1]["reward"] = logs["reward"]
                if "entropy" in logs:
                    steps[-1]["entropy"] = logs["entropy"]
                if "tools/call_frequency" in logs:
                    steps[-1]["tool_calls_per_episode"] = logs["tools/call_frequency"]

    return TimedGRPOTrainer, StepTimer()


def run_trl(args) -> dict:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    family, tokenizer = get_family("arith"), load_tokenizer(args.model)
    tasks = train_tasks(args, family)
    model = load_model(args.model)  # rlyard's cache of the embedded GGUF is a plain HF folder (no gguf flag)
    if getattr(model.config, "quantization_config", None) is not None:
        raise SystemExit("TRL needs a plain model; this one is flagged as quantized (pass a converted folder)")
    steps: list[dict] = []
    TimedGRPOTrainer, timer = timed_grpo(steps)
    trainer = TimedGRPOTrainer(model=model, callbacks=[timer], **trl_setup(args, family, tokenizer, tasks))
    started = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - started
    for row, tokens in zip(steps, TimedGRPOTrainer.sampled_tokens):  # one generation call a step
        row["sampled_tokens"] = tokens
    merged = trainer.model.merge_and_unload().eval()
    accuracy = held_out_accuracy(merged, tokenizer, family, args)
    del trainer, merged, model
    gc.collect()
    return {"steps": steps, "train_seconds": train_seconds, "final_accuracy": accuracy}


def run_rlyard(args) -> dict:
    from rlyard.orchestrate.entry import train

    run_dir = Path(tempfile.mkdtemp(prefix="vs_trl-rlyard-"))
    started = time.perf_counter()
    result = train(run_config(args, run_dir), run_dir)
    wall = time.perf_counter() - started
    rows = read_metrics(run_dir / "metrics.jsonl")
    steps = [{"step": r["step"], "seconds": r["time/step"], "generate_seconds": r["time/generate"], "reward": r["reward/mean"],
              "sampled_tokens": round(r["time/generate_tokens_per_s"] * r["time/generate"]),
              "entropy": r.get("loss/entropy")}
             for r in rows if "time/step" in r]
    return {"steps": steps, "train_seconds": result.train_seconds, "wall_seconds": wall, "run_dir": str(run_dir),
            "base_accuracy": result.base_accuracy, "final_accuracy": checkpoint_accuracy(*run_checkpoint(run_dir), args),
            "final_accuracy_engine": result.final_accuracy}


def merged_policy(config: RunConfig, checkpoint: Path):
    """A run's policy at `checkpoint` as one plain float32 model (LoRA merged; a full fine-tuning run as it is)."""
    policy = trained_policy(config, checkpoint)
    return (policy.merge_and_unload() if is_peft(policy) else policy).eval()


def checkpoint_accuracy(config: RunConfig, checkpoint: Path, args) -> float | None:
    """A run's checkpoint scored as TRL's model is (`held_out_accuracy`). The run's own final eval
    (`final_accuracy_engine`) decodes with the run's engine, e.g. int8 weights."""
    if not args.eval_size:
        return None
    merged = merged_policy(config, checkpoint)
    accuracy = held_out_accuracy(merged, load_tokenizer(config.model.name), get_family("arith"), args)
    del merged
    gc.collect()
    return accuracy


def rescore(args) -> None:
    """--rescore RUN_DIR...: score finished rlyard runs of this bench as TRL's model is scored."""
    rows = []
    for run_dir in map(Path, args.rescore):
        config, checkpoint = run_checkpoint(run_dir)
        metrics = read_metrics(run_dir / "metrics.jsonl")
        engine = next((row["eval/accuracy"] for row in reversed(metrics) if "eval/accuracy" in row), None)
        seed = config.train.seed
        rows.append({"run": run_dir.name, "seed": seed, "final_accuracy": checkpoint_accuracy(config, checkpoint, args),
                     "final_accuracy_engine": engine})
        print(f"{run_dir.name}: seed {seed}, merged float32 {rows[-1]['final_accuracy']:.1%}, "
              f"the run's own eval {'-' if engine is None else format(engine, '.1%')}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(scrub({"settings": vars(args), "machine": machine(), "runs": rows}), indent=2))
    print(f"[vs_trl] wrote {out}")


def summarise(run: dict, args) -> dict:
    steps = run["steps"]
    timed = steps[1:] or steps  # step 1 is warm-up
    seconds = [s["seconds"] for s in timed]
    generate = sum(s["generate_seconds"] for s in timed)
    tokens = sum(s["sampled_tokens"] for s in timed)
    rewards = [s.get("reward", float("nan")) for s in steps]
    reached = time_to_threshold(steps, rewards, args.threshold, args.window)
    return {
        "s_per_step": statistics.fmean(seconds), "s_per_step_median": statistics.median(seconds),
        "s_per_step_all": statistics.fmean(s["seconds"] for s in steps),
        "generate_tokens_per_s": tokens / generate if generate else 0.0,
        "train_tokens_per_s": tokens / (sum(seconds) - generate) if sum(seconds) > generate else 0.0,
        "sampled_tokens_per_step": tokens / len(timed),
        "generate_share": generate / sum(seconds),
        "rewards": rewards, "entropies": [s.get("entropy") for s in steps], "threshold_step": reached[0], "threshold_seconds": reached[1],
        "final_accuracy": run.get("final_accuracy"),
    }


def time_to_threshold(steps, rewards, threshold, window):
    """First step whose trailing `window`-step mean reward is >= threshold, and the step seconds up to it."""
    for i in range(window - 1, len(rewards)):
        if statistics.fmean(rewards[i - window + 1 : i + 1]) >= threshold:
            return steps[i]["step"], sum(s["seconds"] for s in steps[: i + 1])
    return None, None


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()
                  if line.startswith("Model name")), platform.processor())
    import transformers

    info = {"cpu": model, "cores": os.cpu_count(), "threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
            "load_average_at_start": os.getloadavg(), "torch": torch.__version__, "transformers": transformers.__version__,
            "commit": commit()}
    try:
        import trl

        info["trl"] = trl.__version__
    except ImportError:
        pass
    return info


def report(results: dict, args) -> None:
    trl, ours = results.get("trl"), results.get("rlyard")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)
    print(f"\nrlyard vs TRL GRPOTrainer: {args.prompts} prompts x {args.n} completions, {args.max_new_tokens} tokens, "
          f"LoRA r{args.lora_rank}/a{args.lora_alpha}, lr {args.lr}, {args.steps} steps, {args.threads} threads")
    rows = [("s/step (mean, steps 2+)", "s_per_step", ".2f"), ("s/step (median, steps 2+)", "s_per_step_median", ".2f"),
            ("s/step (mean, all steps)", "s_per_step_all", ".2f"), ("generation tokens/s", "generate_tokens_per_s", ".1f"),
            ("training tokens/s", "train_tokens_per_s", ".1f"), ("sampled tokens/step", "sampled_tokens_per_step", ".0f"),
            ("generation share of step", "generate_share", ".0%"),
            (f"step reaching reward {args.threshold} (avg {args.window})", "threshold_step", "d"),
            ("seconds to reach it", "threshold_seconds", ".1f"), ("held-out greedy accuracy", "final_accuracy", ".1%")]
    print(f"{'':38} {'TRL':>10} {'rlyard':>10}")
    for label, key, spec in rows:
        print(f"{label:38} {fmt(trl and trl[key], spec):>10} {fmt(ours and ours[key], spec):>10}")
    if trl and ours:
        print(f"{'speed-up per step (TRL / rlyard)':38} {trl['s_per_step'] / ours['s_per_step']:>20.2f}x")
    if ours and ours.get("base_accuracy") is not None:
        print(f"{'base model held-out accuracy':38} {ours['base_accuracy']:>20.1%}")
    print("\nreward per step (mean over the batch)")
    print(f"{'step':>4} {'TRL':>6} {'rlyard':>7}")
    for i in range(args.steps):
        cells = [fmt(side["rewards"][i] if side and i < len(side["rewards"]) else None, ".3f") for side in (trl, ours)]
        print(f"{i + 1:>4} {cells[0]:>6} {cells[1]:>7}")


def seed_sweep(args) -> None:
    """Each seed in its own process (a fresh torch state, as a separate invocation would have)."""
    results = {"settings": vars(args), "machine": machine(), "seeds": {}}
    for seed in args.seeds:
        out = Path(tempfile.mkdtemp(prefix="vs_trl-seed")) / "result.json"
        command = [sys.executable, __file__, "--seed", str(seed), "--out", str(out)] + passthrough(args)
        print(f"[vs_trl] seed {seed}: {' '.join(command[1:])}", flush=True)
        subprocess.run(command, check=True)
        results["seeds"][seed] = json.loads(out.read_text())
    print(f"\nheld-out greedy accuracy over seeds {args.seeds}")
    print(f"{'seed':>6} {'TRL':>8} {'rlyard':>8} {'TRL s/step':>11} {'rlyard s/step':>14}")
    sides = [side for side in ("trl", "rlyard") if args.only in (None, side)]
    for seed, run in results["seeds"].items():
        cells = [run.get(side, {}).get("final_accuracy") for side in ("trl", "rlyard")]
        steps = [run.get(side, {}).get("s_per_step") for side in ("trl", "rlyard")]
        print(f"{seed:>6} " + " ".join("-".rjust(8) if c is None else f"{c:>8.1%}" for c in cells)
              + " " + " ".join("-".rjust(w) if v is None else f"{v:>{w}.2f}" for v, w in zip(steps, (11, 14))))
    for side in sides:
        accuracies = [run[side]["final_accuracy"] for run in results["seeds"].values() if run.get(side)]
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        results[f"{side}_accuracy_mean"], results[f"{side}_accuracy_sd"] = statistics.fmean(accuracies), spread
        print(f"{side:>6}: mean {statistics.fmean(accuracies):.1%}, sd {spread:.1%} over {len(accuracies)} seeds")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(scrub(results), indent=2))
    print(f"\n[vs_trl] wrote {out}")


def passthrough(args) -> list[str]:
    """The command-line settings of this run, for the per-seed child processes."""
    flags = []
    for name in ("model", "steps", "prompts", "n", "max_new_tokens", "lr", "temperature", "lora_rank", "lora_alpha",
                 "micro_batch", "truncated_reward", "eval_size", "threshold", "window", "threads", "precision"):
        flags += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    flags += ["--trl-gradient-checkpointing"] * args.trl_gradient_checkpointing + (["--only", args.only] if args.only else [])
    flags += ["--rlyard-set", *args.rlyard_set] if args.rlyard_set else []
    return flags


def main() -> None:
    args = parse_args()
    if args.rescore:
        return rescore(args)
    if args.seeds:
        return seed_sweep(args)
    results: dict = {"settings": vars(args), "machine": machine()}
    raw: dict = {}
    for side, runner in (("trl", run_trl), ("rlyard", run_rlyard)):
        if args.only in (None, side):
            print(f"[vs_trl] running {side} ...", flush=True)
            raw[side] = runner(args)
            results[side] = summarise(raw[side], args) | {k: v for k, v in raw[side].items() if k != "steps"}
            results[side]["steps"] = raw[side]["steps"]
            results[side]["load_average_after"] = os.getloadavg()  # 1/5/15-min: how busy the machine was
    if "trl" in results and "rlyard" in results:
        results["speedup"] = results["trl"]["s_per_step"] / results["rlyard"]["s_per_step"]
    report(results, args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(scrub(results), indent=2))
    print(f"\n[vs_trl] wrote {out}")


if __name__ == "__main__":
    main()
