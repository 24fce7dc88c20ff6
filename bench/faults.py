"""Training runs with 10% injected faults of each kind: is every broken episode flagged, none lost?

    python bench/faults.py                                    # ~1-3 min on 2 CPUs
    python bench/faults.py --json bench/results/faults.json    # the committed figures

Runs the sync loop on a tiny random llama that ends its replies (rlyard/testing/tiny.py), once on
the single-turn and once on the two-turn family of rlyard/testing/faults.py, each with
env.options.fault_rate=RATE: every episode draws each of the six kinds (crash_reset,
crash_step, crash_score, sandbox, garbage, hang) with probability RATE. Each injected fault is
tagged; the audit (faults.audit) matches every row of trajectories.jsonl to the fault it
carries. Printed per run: episodes, faults injected (per kind), infra-flagged, survived, lost
(an injected fault with no row: must be 0), mis-scored (an infra fault trained as a score, a
healthy episode flagged, or a reward that is not the honest verdict: must be 0), finished.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rlyard.config import load_config
from rlyard.models import load_tokenizer
from rlyard.observe.store import read_jsonl
from rlyard.orchestrate.entry import train
from rlyard.testing import faults
from rlyard.testing.tiny import save_tiny_llama

FAMILIES = {"single-turn": "rlyard.testing.faults:SINGLE", "multi-turn": "rlyard.testing.faults:MULTI"}


def run_one(label: str, model_dir: Path, run_dir: Path, args: argparse.Namespace, fault_seed: int) -> dict:
    faults.reset_ledger()
    config = load_config(None, [
        f"model.name={model_dir}", f"env.name={FAMILIES[label]}", "env.train_size=16", f"env.options.fault_rate={args.rate}",
        f"env.options.fault_seed={fault_seed}", f"env.options.hang_s={args.hang_s}", f"rollout.prompts_per_step={args.prompts}",
        f"rollout.n={args.n}", "rollout.max_new_tokens=8", "agent.max_tokens_per_turn=8", "agent.max_turns=2", "eval.size=0",
        "output.progress=false", "output.plot=false", f"output.run_dir={run_dir}", "model.lora.enabled=false", "algo.lr=1e-3",
        f"train.steps={args.steps}", "train.threads=1", f"train.seed={args.seed}",
    ])
    started = time.perf_counter()
    result = train(config, run_dir)
    seconds = time.perf_counter() - started
    rows = read_jsonl(run_dir / "trajectories.jsonl")
    audited = faults.audit(rows, dict(faults.LEDGER))
    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "rollout/infra_errors" in m]
    counted = sum(m["rollout/infra_errors"] for m in metrics)
    finished = result.steps == args.steps and len(metrics) == args.steps
    return audited.as_dict() | {
        "run": label, "fault_seed": fault_seed, "steps": args.steps, "seconds": round(seconds, 1), "finished": finished,
        "infra_in_metrics": counted, "two_turn_episodes": sum(len(r["info"].get("graded", [])) == 2 for r in rows),
        "finish_reasons": dict(sorted(Counter(r["finish_reason"] for r in rows).items())),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=0.1, help="probability of each fault kind per episode")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--hang-s", type=float, default=0.2, help="how long a hanging grader sleeps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_tiny_llama(Path(tmp) / "model", load_tokenizer("embedded"))
        for i, label in enumerate(FAMILIES):
            results.append(run_one(label, model_dir, Path(tmp) / label, args, fault_seed=args.seed * 100 + i))
    print(f"{'run':<12} {'episodes':>8} {'injected':>8} {'infra-flagged':>13} {'survived':>8} {'lost':>4} {'mis-scored':>10} "
          f"{'finished':>8} {'seconds':>7}")
    for r in results:
        print(f"{r['run']:<12} {r['episodes']:>8} {r['injected']:>8} {r['infra_flagged']:>13} {r['survived']:>8} {r['lost']:>4} "
              f"{r['mis_scored']:>10} {'yes' if r['finished'] else 'NO':>8} {r['seconds']:>7}")
        print(f"{'':<12} injected per kind: {', '.join(f'{k} {v}' for k, v in sorted(r['by_kind'].items()))}; "
              f"two-turn episodes {r['two_turn_episodes']}")
        for problem in r["problems"]:
            print(f"{'':<12} ! {problem}")
    total = {key: sum(r[key] for r in results) for key in ("episodes", "injected", "infra_flagged", "survived", "lost", "mis_scored")}
    ok = total["lost"] == total["mis_scored"] == 0 and all(r["finished"] and r["infra_in_metrics"] == r["infra_flagged"] for r in results)
    print(f"{'total':<12} {total['episodes']:>8} {total['injected']:>8} {total['infra_flagged']:>13} {total['survived']:>8} "
          f"{total['lost']:>4} {total['mis_scored']:>10} {'yes' if all(r['finished'] for r in results) else 'NO':>8}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "command": "python bench/faults.py " + " ".join(sys.argv[1:]), "rate_per_kind": args.rate, "kinds": list(faults.KINDS),
            "machine": f"{platform.machine()}, {platform.python_version()}", "date": time.strftime("%Y-%m-%d"),
            "runs": results, "total": total, "ok": ok,
        }, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
