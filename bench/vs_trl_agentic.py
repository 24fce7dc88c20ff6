"""TRL's GRPOTrainer with tool calling and rlyard side by side on a multi-turn task, one invocation.

    pip install -e '.[bench]'                       # TRL is a bench-only extra
    scripts/agentic_quickstart.sh                    # makes an SFT policy of the two-lookup task (OUT/sft)
    python bench/vs_trl_agentic.py --sft runs/agentic-quickstart/sft
    python bench/vs_trl_agentic.py --sft ... --quick  # 2 steps each, 10 held-out tasks: a smoke run

The task is the agentic quickstart's (`configs/agentic_quickstart.yaml`): the `files` family with
two lookups (a device's site in one folder, then that site's team in another), tools as one
fenced bash block a reply, `submit <answer>` to answer. The base model never solves it (0%), so
RL from it has nothing to learn from on either side: both start from the same SFT policy (the
`--sft` run, exported to a plain model folder with `rlyard export`), each adding a fresh LoRA.

Equal on both sides: that model, the task stream (rlyard's own, fed to TRL unshuffled), the
prompts (the system and user messages rlyard's environment writes), the tools (TRL calls a
`bash` method that runs the command through the same rlyard environment and sandbox and returns
the text rlyard's loop would show, cut the same way), the reward (rlyard's grader, read from the
environment after the episode: TRL's `get_reward`), prompts per step, group size, temperature,
lr (constant, AdamW, clip 1.0), LoRA rank / alpha / targets, token-mean PPO-clip loss, no KL,
group-std advantages, micro-batches, seed and threads. Both are evaluated by the same command,
`rlyard eval`, greedy on the same held-out tasks (TRL's LoRA is merged into the model first).

What TRL 1.16 lacks for this task, and how this bench stands in for it:
- no parser for SmolLM2's chat template (`add_response_schema` raises "Unrecognized chat
  template"): the bench sets `tokenizer.response_template` to one that reads a ```bash block as a
  call of the `bash` tool (SMOL_BASH_TEMPLATE);
- no per-turn token cap: `max_completion_length` bounds each generation call and the whole
  episode (replies and tool results) at once; it is set to rlyard's episode budget less the
  longest prompt, and rlyard's 64-token turn cap has no TRL counterpart;
- no way for a tool to end the episode: after `submit` TRL lets the model write one more reply
  (its tool calls are answered "the episode is over"; the reward is the submitted answer's).
Timing: a step is the wall clock from sampling to the optimizer step (TRL: a TrainerCallback;
rlyard: `time/step`); generation is TRL's `_generate_single_turn` calls (every turn) and
rlyard's `time/generate`. Means exclude step 1 (warm-up).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
from rlyard.agent.loop import cut_middle
from rlyard.config import load_config
from rlyard.data import run_tasks
from rlyard.envs import get_family
from rlyard.models import load_model, load_tokenizer
from rlyard.observe.metrics import read_metrics
from provenance import scrub  # bench/ is on sys.path when a script runs
from vs_trl import grpo_config, machine, time_to_threshold, timed_grpo

SMOL_BASH_TEMPLATE = {  # transformers' response_template: a ```bash block is a call of the bash tool
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {"open_pattern": r"```bash\n", "close_pattern": r"\n?```\s*", "repeats": True, "content": "text",
                       "transform": {"type": "function", "function": {"name": "bash", "arguments": {"command": "{content}"}}}},
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


# SmolLM2's chat template, which writes an assistant message's content only, with its tool calls
# written out: a bash call as the fenced block the model wrote, any other as JSON (TRL's check that
# a template renders tool calls uses a made-up tool). TRL only renders what follows a reply (the
# tool's message, the next header); the reply's own tokens stay as sampled.
SMOL_TOOL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{% if message['tool_calls'] is defined and message['tool_calls'] %}{% for call in message['tool_calls'] %}"
    "{% set args = call['function']['arguments'] %}"
    "{% if call['function']['name'] == 'bash' and args is mapping and 'command' in args %}"
    "{{ ('\\n' if message['content'] else '') + '```bash\\n' + args['command'] + '\\n```' }}"
    "{% else %}{{ '\\n' + (call['function'] | tojson) }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sft", required=True, help="the SFT run both sides start from (the agentic quickstart's OUT/sft)")
    parser.add_argument("--config", default="configs/agentic_quickstart.yaml", help="task, budgets, group, lr (default: the agentic quickstart's)")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps for each framework (default 10, the quickstart's RL)")
    parser.add_argument("--eval-size", type=int, default=100, help="held-out tasks for the greedy eval of both (0 = none)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 steps, 10 held-out tasks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads for both")
    parser.add_argument("--micro-batch", type=int, default=4, help="episodes per forward/backward (default 4)")
    parser.add_argument("--threshold", type=float, default=0.9, help="reward level for 'time to threshold' (default 0.9)")
    parser.add_argument("--window", type=int, default=3, help="moving-average window of the reward curve (default 3)")
    parser.add_argument("--only", choices=["trl", "rlyard"], help="run one side only")
    parser.add_argument("--work", help="folder for the exported model, runs and evals (default: a new temporary folder)")
    parser.add_argument("--out", default="bench/results/vs_trl_agentic.json", help="JSON results")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.eval_size = 2, min(args.eval_size, 10)
    return args


def rlyard_cli(*argv: str) -> None:
    print(f"$ rlyard {' '.join(argv)}", flush=True)
    subprocess.run([sys.executable, "-m", "rlyard.cli", *argv], check=True)


class FilesTools:
    """One TRL rollout's environment: rlyard's `files` environment for the row's task, its bash
    tool as a method, and rlyard's grade as the reward. TRL keeps a pool of these and calls
    `reset` with the dataset row before each rollout."""

    family = tasks = None  # set by run_trl before training
    output_chars = 1000

    def __init__(self):
        self.env, self.done = None, False

    def reset(self, task_index: int, **_) -> None:
        self._close()
        self.env, self.done = FilesTools.family.make_env(), False
        self.env.reset(FilesTools.tasks[task_index])  # the prompt itself is the dataset row's (the same messages)

    def bash(self, command: str) -> str:
        """Run a shell command in the task's folder (`submit <answer>` submits the answer).

        Args:
            command: the command line to run.
        """
        if self.done:
            return "the episode is over"
        result = self.env.step(f"```bash\n{command}\n```")
        self.done = result.done
        text = "\n\n".join(str(m.get("content", "")) for m in result.messages) or result.reason
        return cut_middle(text, FilesTools.output_chars)

    def get_reward(self) -> float:
        reward = self.env.score().value
        self._close()
        return reward

    def _close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


def task_stream(config, family, count: int, train_seed: int):
    """The tasks rlyard's run draws with train.seed=train_seed (its TaskStream), in its order."""
    return run_tasks(family, config.env, train_seed, count)


def run_trl(args, config, model_dir: Path, work: Path) -> dict:
    from datasets import Dataset
    from peft import LoraConfig

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    family, tokenizer = get_family(config.env.name), load_tokenizer(str(model_dir))
    tokenizer.response_template, tokenizer.chat_template = SMOL_BASH_TEMPLATE, SMOL_TOOL_CHAT_TEMPLATE
    tasks = task_stream(config, family, args.steps * config.rollout.prompts_per_step, args.seed)
    FilesTools.family, FilesTools.tasks, FilesTools.output_chars = family, tasks, config.agent.tool_output_chars
    rows = []
    for index, task in enumerate(tasks):
        env = family.make_env()
        rows.append({"prompt": env.reset(task), "task_index": index})
        env.close()
    longest_prompt = max(len(tokenizer(tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False),
                                       add_special_tokens=False).input_ids) for r in rows)
    steps: list[dict] = []
    TimedGRPOTrainer, timer = timed_grpo(steps)
    episodes = config.rollout.prompts_per_step * config.rollout.n
    grpo = grpo_config(str(work / "trl"), args.seed, args.steps, args.micro_batch, episodes, config.rollout.n,
                       config.rollout.temperature, config.algo.lr,
                       max_completion_length=config.agent.max_total_tokens - longest_prompt,
                       max_tool_calling_iterations=config.agent.max_turns - 1)
    lora = LoraConfig(r=config.model.lora.rank, lora_alpha=config.model.lora.alpha, lora_dropout=config.model.lora.dropout,
                      target_modules=list(config.model.lora.target_modules), task_type="CAUSAL_LM")
    trainer = TimedGRPOTrainer(model=load_model(str(model_dir)), args=grpo, train_dataset=Dataset.from_list(rows),
                               processing_class=tokenizer, peft_config=lora, environment_factory=FilesTools,
                               callbacks=[timer])
    started = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - started
    merged = work / "trl_policy"
    trainer.model.merge_and_unload().save_pretrained(merged)
    load_tokenizer(str(model_dir)).save_pretrained(merged)
    return {"steps": steps, "train_seconds": train_seconds, "policy": str(merged), "generate_calls": TimedGRPOTrainer.calls,
            "max_completion_length": grpo.max_completion_length}


def run_rlyard(args, model_dir: Path, work: Path) -> dict:
    run_dir = work / "rlyard"
    started = time.perf_counter()
    rlyard_cli("train", args.config, f"model.name={model_dir}", f"train.steps={args.steps}", f"train.seed={args.seed}",
               f"train.threads={args.threads}", f"train.micro_batch_size={args.micro_batch}", f"output.run_dir={run_dir}",
               "eval.at_start=false", "eval.at_end=false", "output.checkpoint_every=0")
    wall = time.perf_counter() - started
    rows = read_metrics(run_dir / "metrics.jsonl")
    steps = [{"step": r["step"], "seconds": r["time/step"], "generate_seconds": r["time/generate"], "reward": r["reward/mean"]}
             for r in rows if "time/step" in r]
    return {"steps": steps, "wall_seconds": wall, "policy": str(run_dir)}


def held_out(args, side: str, policy: str, work: Path) -> dict | None:
    if not args.eval_size:
        return None
    out = work / f"eval_{side}.json"
    where = ["--checkpoint", policy] if side == "rlyard" else [args.config, f"model.name={policy}"]
    rlyard_cli("eval", *where, f"train.threads={args.threads}", "--size", str(args.eval_size), "--output", str(out))
    result = json.loads(out.read_text())
    return {k: result[k] for k in ("accuracy", "mean_reward", "mean_turns", "tasks") if k in result}


def summarise(run: dict, episodes: int, args) -> dict:
    timed = run["steps"][1:] or run["steps"]
    seconds = [s["seconds"] for s in timed]
    rewards = [s.get("reward", float("nan")) for s in run["steps"]]
    reached = time_to_threshold(run["steps"], rewards, args.threshold, args.window)
    return {"s_per_step": statistics.fmean(seconds), "s_per_step_median": statistics.median(seconds),
            "trajectories_per_s": episodes / statistics.fmean(seconds),
            "generate_share": sum(s["generate_seconds"] for s in timed) / sum(seconds),
            "rewards": rewards, "threshold_step": reached[0], "threshold_seconds": reached[1]}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = load_config(args.config)
    if config.env.name != "files" or (config.env.options or {}).get("tool_format") != "bash_block":
        raise SystemExit(f"{args.config}: this bench runs the files family with tool_format bash_block (the agentic quickstart's)")
    work = Path(args.work or tempfile.mkdtemp(prefix="vs_trl_agentic-"))
    model_dir = work / "sft_policy"
    if not (model_dir / "config.json").exists():
        rlyard_cli("export", args.sft, "--out", str(model_dir), "--dtype", "float32")
    episodes = config.rollout.prompts_per_step * config.rollout.n
    results: dict = {"settings": vars(args), "machine": machine(), "episodes_per_step": episodes,
                     "agent": config.agent.model_dump(), "lr": config.algo.lr, "lora": config.model.lora.model_dump()}
    for side in ("trl", "rlyard"):
        if args.only not in (None, side):
            continue
        print(f"[vs_trl_agentic] running {side} ...", flush=True)
        run = run_trl(args, config, model_dir, work) if side == "trl" else run_rlyard(args, model_dir, work)
        results[side] = summarise(run, episodes, args) | run | {"held_out": held_out(args, side, run["policy"], work)}
    if "trl" in results and "rlyard" in results:
        results["speedup"] = results["trl"]["s_per_step"] / results["rlyard"]["s_per_step"]
    report(results)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(scrub(results), indent=2))
    print(f"\n[vs_trl_agentic] wrote {out}")


def report(results: dict) -> None:
    sides = [s for s in ("trl", "rlyard") if s in results]
    print(f"\n{'':32}" + "".join(f"{s:>10}" for s in sides))
    for label, key, spec in (("s/step (mean, steps 2+)", "s_per_step", ".2f"), ("s/step (median)", "s_per_step_median", ".2f"),
                             ("trajectories/s", "trajectories_per_s", ".3f"), ("generation share", "generate_share", ".0%")):
        print(f"{label:32}" + "".join(f"{format(results[s][key], spec):>10}" for s in sides))
    held = [results[s]["held_out"] for s in sides]
    if all(held):
        print(f"{'held-out greedy success':32}" + "".join(f"{h['accuracy']:>10.1%}" for h in held))
    if "speedup" in results:
        print(f"{'speed-up per step (TRL / rlyard)':32}{results['speedup']:>10.2f}x")


if __name__ == "__main__":
    main()
