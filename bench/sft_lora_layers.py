"""SFT step time with LoRA in every decoder layer or only in the last N (`model.lora.last_layers`).

    python bench/sft_lora_layers.py                                  # configs/code_learn.yaml, all / 15 / 8 layers
    python bench/sft_lora_layers.py --layers all 15 8 --repeats 3 --json bench/results/sft_lora_layers.json

The same optimizer steps (the recipe's batches of 4 oracle conversations on generated code tasks,
`rlyard collect` into a temporary file unless `--demos` names one) on a fresh adapter for each
setting, settings alternating within each repeat. Reported per setting: the mean seconds of steps
2 on (the first warms kernels up), and its ratio to all layers, per repeat. Nothing here measures
what the policy learns: `docs/sft.md` says where that was measured.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provenance import command_line, commit  # noqa: E402  (bench/ is on sys.path when a script runs)

import torch  # noqa: E402

from rlyard.agent.loop import TemplateRenderer  # noqa: E402
from rlyard.config import load_config  # noqa: E402
from rlyard.models import autocast_choice, load_tokenizer  # noqa: E402
from rlyard.orchestrate.setup import policy_model, seed_everything, stop_tokens  # noqa: E402
from rlyard.sft.batching import DataOrder  # noqa: E402
from rlyard.sft.train import prepare_data, train_step  # noqa: E402


def step_seconds(config, steps: int) -> list[float]:
    """Seconds of each of the first `steps` SFT steps of a fresh adapter, as `rlyard sft` runs them."""
    s = config.sft
    seed_everything(s.seed)
    tokenizer = load_tokenizer(config.model.name, config.model.chat_template)
    renderer = TemplateRenderer(tokenizer, stop_tokens(tokenizer))
    train = prepare_data(config, renderer, renderer.reply_stop_id()).train.examples
    order = DataOrder([len(e.token_ids) for e in train], s.batch_size, s.micro_batch_size, s.length_window, s.seed)
    model = policy_model(config.model)
    precision, _ = autocast_choice(config.model.autocast, config.model.device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=s.lr)
    times = []
    for step in range(steps):
        micro = [[train[i] for i in indices] for indices in order.step(step)]
        started = time.perf_counter()
        train_step(model, optimizer, micro, s.lr, s.max_grad_norm, precision)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/code_learn.yaml")
    parser.add_argument("--demos", help="conversations to train on (JSONL); default: 48 oracle episodes collected now")
    parser.add_argument("--layers", nargs="+", default=["all", "15", "8"], help="'all' or a number of last layers")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per setting and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        demos = args.demos
        if demos is None:
            demos = str(Path(tmp) / "demos.jsonl")
            subprocess.run([sys.executable, "-m", "rlyard.cli", "collect", "code", "-o", "source=generated", "-o", "tool_format=bash_block",
                            "-o", "arm_weights={bash: 1}", "-n", "48", "--out", demos, "--no-progress"], check=True)
        means: dict[str, list[float]] = {layers: [] for layers in args.layers}
        for repeat in range(args.repeats):
            for layers in (args.layers if repeat % 2 == 0 else args.layers[::-1]):
                overrides = [f"sft.data={demos}", "sft.eval_fraction=0"]
                if layers != "all":
                    overrides.append(f"model.lora.last_layers={layers}")
                times = step_seconds(load_config(args.config, overrides), args.steps)
                means[layers].append(statistics.mean(times[1:]))
                print(f"[bench] repeat {repeat + 1}, LoRA layers {layers}: {means[layers][-1]:.2f} s a step "
                      f"({', '.join(f'{t:.2f}' for t in times)})", flush=True)
    reference = means[args.layers[0]]
    result = {"command": command_line(["python", "bench/sft_lora_layers.py", *sys.argv[1:]]), "commit": commit(),
              "cpu_threads": args.threads, "load_average_at_end": os.getloadavg()[0], "config": args.config,
              "steps": args.steps, "repeats": args.repeats, "seconds_per_step": means, "ratio_to_first": {}}
    for layers, values in means.items():
        ratios = [v / r for v, r in zip(values, reference)]
        result["ratio_to_first"][layers] = {"per_repeat": ratios, "mean": statistics.mean(ratios),
                                            "sd": statistics.stdev(ratios) if len(ratios) > 1 else 0.0}
        print(f"[bench] LoRA layers {layers}: {statistics.mean(values):.2f} s a step, "
              f"{statistics.mean(ratios):.2f}x of {args.layers[0]} (sd {result['ratio_to_first'][layers]['sd']:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
