#!/usr/bin/env bash
# The agentic quickstart: collect -> SFT -> RL -> eval on the two-lookup `files` task
# (configs/agentic_quickstart.yaml), embedded SmolLM2-135M, CPU, offline.
#   scripts/agentic_quickstart.sh                       # one RL seed; held-out success after each stage
#   RL_SEEDS="0 1 2" scripts/agentic_quickstart.sh      # three RL runs from the same SFT run
#   OUT=runs/aq DEMOS=128 THREADS=2 scripts/agentic_quickstart.sh model.name=HuggingFaceTB/SmolLM2-360M-Instruct
# Extra arguments are config overrides for every stage. Each stage's held-out evaluation (greedy,
# eval.size tasks of the eval split, never used for demonstrations) goes to $OUT/eval_<stage>.json
# and the table to $OUT/summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh; export PATH="$RLYARD_ENV/bin:$PATH"  # the environment setup.sh installed into
OUT=${OUT:-runs/agentic_quickstart-$(date +%Y%m%d-%H%M%S)}
DEMOS=${DEMOS:-64}
RL_SEEDS=${RL_SEEDS:-0}
THREADS=${THREADS:-2}
CONFIG=configs/agentic_quickstart.yaml
common=("train.threads=$THREADS" "$@")
mkdir -p "$OUT"
stamp() { date +%s; }
started=$(stamp)

echo "== 1/4 collect: $DEMOS oracle demonstrations on train tasks"
rlyard collect files -o hops=2 -o tool_format=bash_block -n "$DEMOS" --out "$OUT/demos.jsonl" --no-progress
t_collect=$(stamp)

echo "== 2/4 base model: held-out success"
rlyard eval "$CONFIG" "${common[@]}" --output "$OUT/eval_base.json"
t_base=$(stamp)

echo "== 3/4 sft on the demonstrations, then held-out success"
rlyard sft "$OUT/demos.jsonl" "$CONFIG" "${common[@]}" "output.run_dir=$OUT/sft"
rlyard eval --checkpoint "$OUT/sft" "${common[@]}" --output "$OUT/eval_sft.json"
t_sft=$(stamp)

for seed in $RL_SEEDS; do
  echo "== 4/4 RL from the SFT weights (seed $seed), then held-out success"
  rlyard train "$CONFIG" "${common[@]}" "model.init_from=$OUT/sft" "train.seed=$seed" "output.run_dir=$OUT/rl_seed$seed" \
    eval.at_start=false eval.at_end=false
  rlyard eval --checkpoint "$OUT/rl_seed$seed" "${common[@]}" --output "$OUT/eval_rl_seed$seed.json"
done
t_rl=$(stamp)

python - "$OUT" "$RL_SEEDS" "$((t_collect - started))" "$((t_base - t_collect))" "$((t_sft - t_base))" "$((t_rl - t_sft))" <<'EOF'
import json, statistics, subprocess, sys
from pathlib import Path
out, seeds = Path(sys.argv[1]), sys.argv[2].split()
seconds = dict(zip(["collect", "base_eval", "sft_and_eval", "rl_and_eval"], map(int, sys.argv[3:7])))
read = lambda name: json.loads((out / f"eval_{name}.json").read_text())
stages = {"base": read("base"), "sft": read("sft"), **{f"rl_seed{s}": read(f"rl_seed{s}") for s in seeds}}
rl = [stages[f"rl_seed{s}"]["accuracy"] for s in seeds]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
summary = {"commit": commit, "rl_seeds": seeds, "seconds": seconds, "stages": stages,
           "rl_accuracy_mean": statistics.fmean(rl), "rl_accuracy_sd": statistics.stdev(rl) if len(rl) > 1 else 0.0}
(out / "summary.json").write_text(json.dumps(summary, indent=2))
print(f"\nheld-out success ({stages['base']['tasks']} eval tasks, greedy), commit {commit}")
print(f"{'stage':<12} {'success':>8} {'turns':>6} {'malformed':>10}")
for name, result in stages.items():
    print(f"{name:<12} {result['accuracy']:>8.1%} {result['mean_turns']:>6.2f} {result.get('mean_malformed_calls', 0.0):>10.2f}")
if len(rl) > 1:
    print(f"RL over seeds {' '.join(seeds)}: mean {summary['rl_accuracy_mean']:.1%}, sd {summary['rl_accuracy_sd']:.1%}")
print(f"seconds: {seconds} (total {sum(seconds.values())}); {out / 'summary.json'}")
EOF
