"""Where one rlyard GRPO step goes: sampling, grading, the learner's passes, the weight push.

    python bench/step_profile.py                      # vs_trl.py's settings, 12 steps, table + JSON
    python bench/step_profile.py --steps 6 --json bench/results/step_profile.json
    python bench/step_profile.py --rlyard-set rollout.quantize=int8   # the int8 engine's step

Runs rlyard's synchronous loop on `bench/vs_trl.py`'s settings (embedded SmolLM2-135M, LoRA r16,
arith "+", 4 prompts x 8 completions, 32 tokens) and times each phase of every step by wrapping
the functions the loop calls, nothing else changed: sampling (the engine's `generate`), grading
(the family's verifier, as the rollout times it), the learner's pre-pass (`Learner.score`: TIS / KL / critic, a no-op
here), the policy forward passes with the loss (`Learner._micro_loss`), `backward`, the optimizer
step with clipping (`Learner._step`), the weight push to the engine (`push_weights`), and the
rest of the step (advantages, batching, host syncs, logging). Step 1 is warm-up and left out of
the means. The output is the profile issue 44 asks for before any speed work: the phases in
seconds per step and as a share of the step.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it
from provenance import command_line, scrub  # bench/ is on sys.path when a script runs
from vs_trl import machine, run_config
from vs_trl import parse_args as vs_trl_settings

PHASES = ("generate", "verify", "score", "forward_and_loss", "backward", "optimizer", "push_weights", "other")


class PhaseClock:
    """Seconds per phase, per step; a phase nested in another (verify inside sampling) is taken out of it."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = defaultdict(float)
        self.stack: list[list[float]] = []  # [started, seconds of nested phases]

    @contextmanager
    def phase(self, name: str):
        self.stack.append([time.perf_counter(), 0.0])
        try:
            yield
        finally:
            started, nested = self.stack.pop()
            elapsed = time.perf_counter() - started
            self.current[name] += elapsed - nested
            if self.stack:
                self.stack[-1][1] += elapsed

    def wrap(self, owner, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            with self.phase(name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)

    def end_step(self, step_seconds: float) -> None:
        row = {phase: self.current.get(phase, 0.0) for phase in PHASES if phase != "other"}
        row["other"] = step_seconds - sum(row.values())
        row["step"] = step_seconds
        self.steps.append(row)
        self.current = defaultdict(float)


def instrument(clock: PhaseClock) -> None:
    import rlyard.orchestrate.sync_loop as sync_loop
    from rlyard.engines import HFEngine
    from rlyard.train.learner import Learner

    clock.wrap(HFEngine, "generate", "generate")
    clock.wrap(Learner, "score", "score")
    clock.wrap(Learner, "_micro_loss", "forward_and_loss")
    clock.wrap(torch.Tensor, "backward", "backward")
    clock.wrap(Learner, "_step", "optimizer")
    clock.wrap(sync_loop, "push_weights", "push_weights")
    run_record = sync_loop.Run.record

    def record(run, step, batch, metrics, step_seconds, **kwargs):
        clock.current["verify"] += sum(traj.timings.get("verify", 0.0) for traj in batch)  # the rollout times its verifier
        clock.end_step(step_seconds)
        return run_record(run, step, batch, metrics, step_seconds, **kwargs)

    sync_loop.Run.record = record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12, help="GRPO steps (default 12; step 1 is warm-up)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rlyard-set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides on top of vs_trl.py's settings (as vs_trl.py's --rlyard-set)")
    parser.add_argument("--json", help="write the profile here")
    args = parser.parse_args()
    settings = vs_trl_settings(["--steps", str(args.steps), "--seed", str(args.seed), "--threads", str(args.threads),
                                "--eval-size", "0", *(["--rlyard-set", *args.rlyard_set] if args.rlyard_set else [])])
    clock = PhaseClock()
    instrument(clock)
    from rlyard.orchestrate.entry import train

    run_dir = Path(tempfile.mkdtemp(prefix="step_profile-"))
    train(run_config(settings, run_dir), run_dir)
    timed = clock.steps[1:] or clock.steps
    mean_step = statistics.fmean(row["step"] for row in timed)
    phases = {phase: statistics.fmean(row[phase] for row in timed) for phase in PHASES}
    print(f"\nrlyard GRPO step on vs_trl.py's settings: {args.steps} steps, means of steps 2-{args.steps}, {args.threads} threads")
    print(f"{'phase':18} {'s/step':>8} {'share':>7}")
    for phase, seconds in phases.items():
        print(f"{phase:18} {seconds:>8.3f} {seconds / mean_step:>7.1%}")
    print(f"{'step':18} {mean_step:>8.3f}")
    if args.json:
        result = {"command": command_line(["python", "bench/step_profile.py", *sys.argv[1:]]), "machine": machine(),
                  "settings": vars(settings), "mean_step_seconds": mean_step, "phase_seconds": phases,
                  "phase_share": {phase: seconds / mean_step for phase, seconds in phases.items()}, "steps": clock.steps}
        Path(args.json).write_text(json.dumps(scrub(result), indent=2) + "\n")
        print(f"[step_profile] wrote {args.json}")


if __name__ == "__main__":
    main()
