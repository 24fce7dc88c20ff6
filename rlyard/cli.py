"""`rlyard train | sft | collect | eval | export | serve | agent | envs`: the command line."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rlyard.config import (ConfigError, default_config_path, dump_config, load_config, load_run_config, resolve_config_path,
                           split_config_args)
from rlyard.demos import cli as collect_cli
from rlyard.observe.viewer import cli as view_cli

EPILOG = """examples:
  rlyard train                                    # quickstart: embedded SmolLM2-135M learns 2-digit addition on CPU
  rlyard train configs/quickstart.yaml algo.lr=2e-5 rollout.n=8
  rlyard train configs/quickstart.yaml algo=dapo   # a preset from configs/algos/ (grpo, dr_grpo, dapo, ppo, ...)
  rlyard train --resume runs/quickstart-20261130-101500
  rlyard train configs/quickstart.yaml algo=dapo --print-config   # the resolved config, nothing runs
  rlyard collect files -o hops=2 -n 200 --out demos.jsonl   # oracle demonstrations on train tasks
  rlyard sft demos.jsonl sft.epochs=2             # supervised fine-tuning on tool-calling conversations
  rlyard train configs/files.yaml model.init_from=runs/sft-demos-20261130-101500   # RL from the SFT weights
  rlyard eval --checkpoint runs/quickstart-20261130-101500 --samples 8 --k 4
  rlyard export runs/quickstart-20261130-101500 --out exports/quickstart   # a Hugging Face folder for transformers / vLLM
  rlyard serve --port 8000                         # OpenAI-compatible API over the embedded model
  rlyard serve --learn configs/quickstart.yaml --api-key KEY   # ... that learns from its posted rewards
  rlyard agent --workspace ./repo --base-url http://127.0.0.1:8000/v1 "Fix the failing test"
  rlyard envs list
  rlyard envs validate code                       # every built-in code task: fails at base, passes when fixed
"""


def cmd_train(args: argparse.Namespace) -> int:
    path, overrides = split_config_args(args.config, args.overrides)
    if args.resume:
        if path is not None:
            raise ConfigError("--resume reads the run's saved config.yaml; pass only overrides (e.g. train.steps=60)")
        run_dir = Path(args.resume)
        config = load_run_config(run_dir, overrides)
    else:
        config = load_config(path or default_config_path(), overrides)
        run_dir = Path(config.output.run_dir or f"runs/{config.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    if args.print_config:
        source = Path(args.resume) / "config.yaml" if args.resume else resolve_config_path(path) if path else default_config_path()
        print(f"# resolved from {source}"
              f"{' with overrides ' + ' '.join(overrides) if overrides else ''}")
        print(dump_config(config), end="")
        return 0
    from rlyard.orchestrate.entry import train  # torch and the model code: not needed to resolve a config

    print(f"[rlyard] run folder: {run_dir}")
    result = train(config, run_dir, resume=bool(args.resume))
    print(f"[rlyard] done: {result.steps} steps, training {result.train_seconds / 60:.1f} min, wall time {result.wall_seconds / 60:.1f} min")
    if result.base_accuracy is not None and result.final_accuracy is not None:
        print(f"[rlyard] held-out greedy accuracy: base {result.base_accuracy:.1%} -> final {result.final_accuracy:.1%} "
              f"({(result.final_accuracy - result.base_accuracy) * 100:+.1f} points)")
    print(f"[rlyard] metrics: {run_dir / 'metrics.jsonl'}  curve: {run_dir / 'reward_curve.png'}")
    return 0


SFT_EPILOG = """examples:
  rlyard sft demos.jsonl                                       # embedded SmolLM2-135M, LoRA, defaults of the sft section
  rlyard sft demos.jsonl model.name=embedded sft.epochs=2 sft.lr=1e-4
  rlyard sft demos.jsonl sft.eval_data=held_out.jsonl          # a separate held-out file instead of sft.eval_fraction
  rlyard sft demos.jsonl model.lora.enabled=false sft.lr=2e-5  # full fine-tuning
  rlyard sft demos.jsonl configs/files.yaml                    # model and agent limits (tool_output_chars) of an RL config
  rlyard sft --resume runs/sft-demos-20261130-101500           # continue a killed run (same data order)
  rlyard sft demos.jsonl --print-config                        # the resolved config, nothing runs
  rlyard train configs/files.yaml model.init_from=runs/sft-demos-20261130-101500  # then RL from it

DATA.jsonl: one conversation per line, {"messages": [...], "tools": [...], "metadata": {...}};
assistant messages hold the reply text or OpenAI tool_calls (written out as Hermes <tool_call>
blocks). The loss covers the assistant tokens only, tokenised exactly as the RL rollout would
hold them. Details: docs/sft.md
"""


def split_sft_args(inputs: list[str]) -> tuple[str | None, str | None, list[str]]:
    """`rlyard sft [DATA] [CONFIG] [OVERRIDES...]` in any order: (data, config, overrides).
    An argument with `=` is an override, one ending in .yaml / .yml the config, any other the data."""
    data, path, overrides = None, None, []
    for item in inputs:
        if "=" in item:
            overrides.append(item)
        elif item.endswith((".yaml", ".yml")) and path is None:
            path = item
        elif data is None:
            data = item
        else:
            raise ConfigError(f"rlyard sft takes one data file, got {data} and {item} (overrides look like key.path=value)")
    return data, path, overrides


def cmd_sft(args: argparse.Namespace) -> int:
    data, path, overrides = split_sft_args(args.inputs)
    if args.resume:
        if path is not None or data is not None:
            raise ConfigError("--resume reads the run's saved config.yaml (its sft.data too); pass only overrides (e.g. sft.steps=60)")
        run_dir = Path(args.resume)
        config = load_run_config(run_dir, overrides)
    else:
        config = load_config(path, overrides)  # without a file: the defaults (embedded model, LoRA)
        if data is not None:
            config.sft.data = data
        if not config.sft.data:
            raise ConfigError("sft.data: no conversations given; run `rlyard sft DATA.jsonl` (see rlyard sft --help)")
        run_dir = Path(config.output.run_dir or f"runs/sft-{Path(config.sft.data).stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    if args.print_config:
        source = Path(args.resume) / "config.yaml" if args.resume else resolve_config_path(path) if path else "the defaults"
        print(f"# resolved from {source}{' with overrides ' + ' '.join(overrides) if overrides else ''}")
        print(dump_config(config), end="")
        return 0
    from rlyard.sft.train import train_sft  # torch and the model code: not needed to resolve a config

    print(f"[rlyard] run folder: {run_dir}")
    result = train_sft(config, run_dir, resume=bool(args.resume))
    print(f"[rlyard] done: {result.steps} steps, training {result.train_seconds / 60:.1f} min, wall time {result.wall_seconds / 60:.1f} min")
    if result.final_eval_loss is not None:
        before = f"{result.base_eval_loss:.4f} -> " if result.base_eval_loss is not None else ""
        print(f"[rlyard] held-out loss: {before}{result.final_eval_loss:.4f}")
    print(f"[rlyard] metrics: {run_dir / 'metrics.jsonl'}  curve: {run_dir / 'loss_curve.png'}")
    print(f"[rlyard] RL from it: rlyard train CONFIG model.init_from={run_dir}")
    return 0


def load_policy(args: argparse.Namespace, extra_overrides: list[str] = (), held_out: bool = True):
    """Config + built components for `eval` / `serve`: a checkpoint's run (its saved config and
    weights) when --checkpoint is given, else a config file. Returns (config, components, checkpoint).
    `held_out=False` builds no held-out tasks (`eval --split train` plays train tasks only)."""
    from rlyard.orchestrate.setup import build, push_weights

    path, overrides = split_config_args(args.config, args.overrides)
    overrides = [*overrides, *extra_overrides]
    checkpoint = None
    if args.checkpoint:
        from rlyard.train import find_checkpoint

        given = Path(args.checkpoint)
        checkpoint = find_checkpoint(given)
        if checkpoint is None:
            raise ConfigError(f"no checkpoint found in {given} (expected a run folder or a checkpoints/step_N folder)")
        config = load_run_config(checkpoint.parent.parent, overrides)
    else:
        config = load_config(path or default_config_path(), overrides)
    built = config if held_out else config.model_copy(update={"eval": config.eval.model_copy(update={"size": 0})})
    components = build(built, train=False, adapter=checkpoint is not None)  # no learner, no training tasks
    if checkpoint is not None:
        from rlyard.train import load_checkpoint

        state = load_checkpoint(checkpoint, components.model)
        push_weights(components, state.get("policy_version", state.get("step", 0)))  # an sft checkpoint has no policy version
    return config, components, checkpoint


def eval_output_path(args: argparse.Namespace, config, checkpoint: Path | None) -> Path:
    """--output, else the run folder of --checkpoint, else runs/ (never the working directory itself)."""
    if args.output:
        return Path(args.output)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if checkpoint is not None:
        return checkpoint.parent.parent / f"eval-{checkpoint.name}-{stamp}.json"
    return Path("runs") / f"eval-{config.name}-{config.env.name}-{stamp}.json"


def cmd_eval(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rlyard.orchestrate.evaluate import evaluate
    from rlyard.orchestrate.sampling import agent_limits

    if args.samples < 0 or args.k < 1 or (args.k > 1 and args.k > args.samples):
        raise ConfigError(f"--k {args.k} needs --samples >= {args.k} (sampled replies per task), got --samples {args.samples}")
    if args.no_greedy and args.samples < 1:
        raise ConfigError("--no-greedy needs --samples >= 1 (without greedy episodes the sampled ones are the evaluation)")
    greedy = not args.no_greedy
    config, components, checkpoint = load_policy(args, [f"eval.size={args.size}"] if args.size is not None else [],
                                                 held_out=args.split != "train")
    tasks = components.eval_tasks
    split = "eval split"
    if args.split == "train":
        from rlyard.data import run_tasks

        tasks = run_tasks(components.family, config.env, config.train.seed, config.eval.size)
        split = f"the first {len(tasks)} tasks of the train stream at train.seed={config.train.seed}"
    plays = ["greedy"] * greedy + ([f"{args.samples} samples each (pass@{args.k})"] if args.samples else [])
    print(f"[rlyard] evaluating on {len(tasks)} {config.env.name} tasks ({split}): {' + '.join(plays)}", flush=True)
    bar = tqdm(total=len(tasks) * (int(greedy) + args.samples), unit="episode", desc="eval", dynamic_ncols=True,
               disable=not config.output.progress)

    def tick(done: int, total: int) -> None:
        bar.update(done - bar.n)

    keep = keep_sampled = None
    if args.trajectories:
        store, keep = episode_keeper(Path(args.trajectories), components.tokenizer)
        if args.samples:
            _, keep_sampled = episode_keeper(Path(args.trajectories) / "sampled", components.tokenizer)

    try:
        result = evaluate(components.engine, components.tokenizer, components.family, tasks,
                          config.eval.max_new_tokens or config.rollout.max_new_tokens, components.stop_token_ids,
                          config.eval.batch_size, samples=args.samples, k=args.k, temperature=config.rollout.temperature,
                          progress=tick, limits=agent_limits(config), on_greedy=keep, on_sampled=keep_sampled, greedy=greedy)
    finally:
        bar.close()
    model_label = f"checkpoint {checkpoint}" if checkpoint else config.model.name
    width = max(12, *(len(key) for key in result))
    print(f"\n{'model':<{width}} {model_label}\n{'env':<{width}} {config.env.name} ({split}, {len(tasks)} tasks)")
    for key, value in result.items():
        print(f"{key:<{width}} {value:.4f}" if isinstance(value, float) else f"{key:<{width}} {value}")
    out = eval_output_path(args, config, checkpoint)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": model_label, "env": config.env.name, "split": split, **result}, indent=2))
    print(f"saved {out}" + (f"; greedy episodes in {store.path} (rlyard view {store.path.parent})" if args.trajectories and greedy else "")
          + (f", sampled ones in {store.path.parent / 'sampled'}" if args.trajectories and args.samples else ""))
    return 0


def episode_keeper(folder: Path, tokenizer):
    """A fresh trajectories.jsonl in `folder` (one evaluation per file: a second run replaces the
    first's episodes) and the callback that appends a batch of episodes to it."""
    from rlyard.observe.store import TrajectoryStore, prompt_text, trajectory_row

    store = TrajectoryStore(folder)
    if store.path.exists():
        store.path.unlink()

    def keep(episodes) -> None:
        store.append(0, [trajectory_row(t, prompt_text(t, tokenizer), tokenizer=tokenizer) for t in episodes])

    return store, keep


EXPORT_EPILOG = """examples:
  rlyard export runs/quickstart-20261130-101500 --out exports/quickstart        # merged weights + tokenizer
  rlyard export runs/quickstart-20261130-101500 --out exports/qs-bf16 --dtype bfloat16
  rlyard export runs/quickstart-20261130-101500/checkpoints/step_000020 --out exports/qs-step20
  rlyard export runs/quickstart-20261130-101500 --out exports/qs-adapter --adapter   # the PEFT adapter only

The merged folder loads with transformers' AutoModelForCausalLM / AutoTokenizer.from_pretrained(OUT)
and with vLLM (vllm serve OUT); the adapter with PeftModel.from_pretrained(base, OUT) or vLLM's
--enable-lora. A run started with model.init_from has that run's weights merged in; its adapter
applies on top of that run's policy, not on model.name. Details: docs/export.md
"""


def cmd_export(args: argparse.Namespace) -> int:
    from rlyard.export import export_run, report  # torch and the model code: not needed for --help

    print(report(export_run(Path(args.run), Path(args.out), adapter=args.adapter, dtype=args.dtype, force=args.force)))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    if args.learn:  # serve and train on the served sessions (docs/live.md)
        from rlyard.live.cli import run_live

        return run_live(args)
    from rlyard.serve import RlyardServer, serve

    config, components, _ = load_policy(args, ["eval.size=0"])
    app = RlyardServer(components.engine, components.tokenizer, args.model_name or config.model.name,
                       components.stop_token_ids, max_tokens_default=config.rollout.max_new_tokens, record_dir=args.record)
    httpd = serve(app, args.host, args.port)
    print(f"[rlyard] serving {app.model_name} at http://{args.host}:{httpd.server_address[1]}/v1 "
          f"(sessions: /sessions/<id>/v1, recorded at /sessions/<id>/trajectories)", flush=True)
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    from rlyard.agent.minimal import run_agent

    workspace = Path(args.workspace)
    if not workspace.is_dir():
        raise ConfigError(f"--workspace {workspace} is not a folder")
    task = Path(args.task[1:]).read_text() if args.task.startswith("@") else args.task
    result = run_agent(task, workspace, args.base_url, args.model, args.api_key, args.max_turns, args.max_tokens, args.temperature)
    print(f"[agent] finished: {result.finish_reason} after {result.turns} turn(s)")
    return 0 if result.finish_reason == "submitted" else 1


def cmd_envs(args: argparse.Namespace) -> int:
    from rlyard.envs import family_names, get_family
    from rlyard.envs.splits import parse_option_pairs

    if args.action == "list":
        for name in family_names():
            print(f"{name:<12} {get_family(name).description}")
        return 0
    family = get_family(args.name)
    options = parse_option_pairs(args.option)
    if args.action == "validate":
        return validate_family(family, options, args.task, args.jobs, args.n)
    n = 5 if args.n is None else args.n
    tasks = family.make_tasks(args.split, n, 0, **options)
    for task in tasks:
        print(json.dumps({"id": task.id, "prompt": task.prompt, "payload": task.payload}))
    if not tasks:
        print(f"rlyard: {no_tasks_message(family, options, args.split, n)}", file=sys.stderr)
        return 1
    return 0


def no_tasks_message(family, options: dict, split: str, n: int) -> str:
    """Why `envs show` printed nothing. (A user's code source with an empty split never gets
    here: its make_tasks raises a SourceError naming the rows loaded and the option.)"""
    if n == 0:
        return f"no tasks asked for (-n 0) in split {split}"
    return f"no tasks in split {split} for {family.name} with options {options or '{}'}"


def validate_family(family, options: dict, task_ids: list[str], jobs: int, n: int | None = None) -> int:
    """Every task of the family checked (tests fail at base, pass with the reference fix); with
    `n`, the first n (a generated source has thousands), for a family whose validate takes `n`."""
    import inspect

    from tqdm import tqdm

    if family.validate is None:
        print(f"rlyard: {family.name} has nothing to validate (its tasks are generated with their answers)", file=sys.stderr)
        return 2
    if n is not None and "n" not in inspect.signature(family.validate).parameters:
        print(f"rlyard: {family.name}'s validate checks every task; it takes no -n", file=sys.stderr)
        return 2
    started = time.perf_counter()
    bars = []  # opened at the first checked task: a source that does not load prints only its error

    def tick(check) -> None:
        if not bars:
            bars.append(tqdm(desc=f"validate {family.name}", unit="task", leave=False))
        bars[0].update(1)

    try:
        checks = family.validate(options, task_ids or None, jobs, tick, **({} if n is None else {"n": n}))
    finally:
        for bar in bars:
            bar.close()
    for check in sorted(checks, key=lambda c: c.task_id):
        status = "ok  " if check.ok else "FAIL"
        print(f"{status} {check.task_id:<24} base {check.base_reward} -> fixed {check.fixed_reward}  ({check.seconds:.1f} s)")
        if check.error:
            print("     " + check.error.replace("\n", "\n     "))
    failed = sum(not c.ok for c in checks)
    print(f"{len(checks) - failed}/{len(checks)} tasks sound ({time.perf_counter() - started:.0f} s)")
    return 1 if failed or not checks else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlyard", description="Agentic RL post-training with verifiable rewards.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a policy (default: the CPU quickstart)", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("config", nargs="?", help="YAML config (default: configs/quickstart.yaml, here or shipped with rlyard)")
    train.add_argument("overrides", nargs="*", help="dotted overrides such as algo.lr=2e-5 rollout.n=8")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    train.add_argument("--print-config", action="store_true",
                       help="print the resolved config (file, presets and overrides applied) as YAML and exit")
    sft = sub.add_parser("sft", help="supervised fine-tuning on tool-calling conversations (JSONL)", epilog=SFT_EPILOG,
                         usage="rlyard sft DATA.jsonl [CONFIG.yaml] [OVERRIDES ...] [--resume RUN_DIR] [--print-config]",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         description="Fine-tune the policy on demonstrations; the run folder then starts RL with model.init_from.")
    sft.add_argument("inputs", nargs="*", metavar="DATA.jsonl CONFIG.yaml OVERRIDES",
                     help="the conversations, an optional YAML config (default: the built-in defaults), and dotted overrides "
                          "such as sft.epochs=2 sft.lr=1e-4")
    sft.add_argument("--resume", metavar="RUN_DIR", help="continue an sft run from its latest checkpoint")
    sft.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    ev = sub.add_parser("eval", help="greedy pass@1 and sampled pass@k on an environment's held-out split")
    ev.add_argument("config", nargs="?", help="YAML config (default: configs/quickstart.yaml, here or shipped with rlyard)")
    ev.add_argument("overrides", nargs="*", help="dotted overrides, e.g. env.name=countdown model.name=HuggingFaceTB/SmolLM2-360M-Instruct")
    ev.add_argument("--checkpoint", metavar="RUN_DIR", help="a run folder (its latest checkpoint) or one checkpoint folder")
    ev.add_argument("--size", type=int, help="number of tasks, held-out or (--split train) of the train stream (default: eval.size)")
    ev.add_argument("--split", choices=["eval", "train"], default="eval",
                    help="eval (default): the held-out split; train: the first --size tasks of the train stream that "
                         "train.seed draws, i.e. the tasks a run of that seed trained on first (with --checkpoint, "
                         "its own run's), to tell a policy that learned its training tasks but not held-out ones "
                         "from one that learned neither")
    ev.add_argument("--samples", type=int, default=0, help="samples per task for pass@k (0 = greedy only)")
    ev.add_argument("--k", type=int, default=1, help="k of pass@k (needs --samples >= k)")
    ev.add_argument("--no-greedy", action="store_true", help="only the sampled episodes (needs --samples): for a family "
                    "whose greedy replies loop (music), half the time; the results then have only the sampled_ keys")
    ev.add_argument("--output", help="JSON file for the results (default: the --checkpoint run's folder, "
                                     "eval-step_N-<time>.json; without --checkpoint runs/eval-<name>-<env>-<time>.json)")
    ev.add_argument("--trajectories", metavar="DIR", help="also keep every greedy episode (text, reward, grader info) in "
                                                          "DIR/trajectories.jsonl (sampled ones, with --samples, in DIR/sampled/), to read with `rlyard view DIR`")
    ex = sub.add_parser("export", help="write a run's policy as a Hugging Face model folder (transformers, PEFT, vLLM)",
                        epilog=EXPORT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="Write the trained policy of a run (its latest checkpoint, or the checkpoints/step_N "
                                    "folder given) as safetensors weights, config.json, generation config and tokenizer "
                                    "with its chat template.")
    ex.add_argument("run", metavar="RUN_DIR", help="an rlyard train / rlyard sft run folder, or one of its checkpoints/step_N")
    ex.add_argument("--out", required=True, metavar="DIR", help="the folder to write (written in a staging folder, then renamed)")
    ex.add_argument("--adapter", action="store_true", help="only the LoRA adapter (adapter_config.json + "
                                                           "adapter_model.safetensors), not merged weights; LoRA runs only")
    ex.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="of the written weights (default: the run's model.dtype)")
    ex.add_argument("--force", action="store_true", help="replace --out when it exists and is not empty")
    sv = sub.add_parser("serve", help="an OpenAI-compatible HTTP server over the policy (chat with tools, completions, sessions)")
    sv.add_argument("config", nargs="?", help="YAML config (default: configs/quickstart.yaml, here or shipped with rlyard)")
    sv.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.name=HuggingFaceTB/SmolLM2-360M-Instruct")
    sv.add_argument("--checkpoint", metavar="RUN_DIR", help="serve a run's latest checkpoint (or one checkpoint folder)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--model-name", help="the model id reported by /v1/models (default: model.name)")
    sv.add_argument("--record", metavar="DIR", help="also write each session's conversations to DIR/<id>.json after every "
                                                    "reply (for rlyard collect --sessions DIR)")
    sv.add_argument("--learn", metavar="CONFIG", help="live RL: also train the served policy on its sessions' posted rewards "
                                                      "(docs/live.md); needs --api-key")
    sv.add_argument("--api-key", help="--learn: the key of the reward and admin routes (or RLYARD_API_KEY)")
    sv.add_argument("--run-dir", help="--learn: the run folder (again: resume from its newest checkpoint)")
    ag = sub.add_parser("agent", help="a minimal tool-using agent against any OpenAI-compatible endpoint")
    ag.add_argument("task", help="the task text, or @FILE to read it from a file")
    ag.add_argument("--workspace", required=True, help="the folder the agent works in (the only writable path in its sandbox)")
    ag.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="OpenAI-compatible base URL (rlyard serve: .../v1 or .../sessions/<id>/v1)")
    ag.add_argument("--model", default="default")
    ag.add_argument("--api-key", default="none")
    ag.add_argument("--max-turns", type=int, default=10)
    ag.add_argument("--max-tokens", type=int, default=512)
    ag.add_argument("--temperature", type=float, default=0.0)
    collect_cli.add_parser(sub)
    view_cli.add_parser(sub)
    envs = sub.add_parser("envs", help="list environment families, print tasks, or validate a task set",
                          epilog="examples:\n  rlyard envs list\n  rlyard envs show code -n 2\n  rlyard envs validate code\n"
                                 "  rlyard envs validate code -o source=swe.jsonl -o mirrors=./mirrors --jobs 4",
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    envs.add_argument("action", choices=["list", "show", "validate"],
                      help="validate: every task's tests fail at its base and pass with its reference fix (code)")
    envs.add_argument("name", nargs="?", default="arith")
    envs.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE", help="a family option (env.options)")
    envs.add_argument("--task", action="append", default=[], metavar="ID", help="validate only this task (repeatable)")
    envs.add_argument("--jobs", type=int, default=2, help="tasks validated at once")
    envs.add_argument("--split", default="eval")
    envs.add_argument("-n", type=int, default=None, help="show: tasks printed (default 5); validate: check only the first N "
                      "(families whose tasks are generated)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from rlyard.envs.registry import FamilyNotFound

    try:
        return COMMANDS[args.command](args)
    except (ConfigError, FamilyNotFound) as exc:
        print(f"rlyard: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a full disk mid-checkpoint, a damaged checkpoint: the message names the file
        checkpoints = sys.modules.get("rlyard.train.checkpoint")  # not imported: it cannot be theirs (torch stays unloaded)
        if checkpoints is None or not isinstance(exc, checkpoints.CheckpointError):
            raise
        print(f"rlyard: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        from rlyard.envs.code.loaders import SourceError
        from rlyard.sft.data import DataError

        if not isinstance(exc, (SourceError, DataError)):  # a bad row, task or data file: one line, no traceback
            raise
        print(f"rlyard: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = f"; resume with: rlyard {args.command} --resume RUN_DIR" if args.command in ("train", "sft") else ""
        print(f"\nrlyard: interrupted{hint}", file=sys.stderr)
        return 130


COMMANDS = {"train": cmd_train, "sft": cmd_sft, "eval": cmd_eval, "export": cmd_export, "serve": cmd_serve, "agent": cmd_agent,
            "envs": cmd_envs, "collect": collect_cli.run, "view": view_cli.run}


if __name__ == "__main__":
    sys.exit(main())
