"""Every family's learning recipe, one driver: collect -> base eval -> SFT -> eval -> RL seeds -> eval.

    scripts/learn.sh CONFIG [OVERRIDES...]          # scripts/<family>/learn.sh passes its config
    RL_SEEDS="0 1 2" DEMOS=256 OUT=runs/learn-code scripts/code/learn.sh
    RESULT=bench/results/learn_code.json SEEDS="0 1 2" scripts/code/learn.sh
    SEEDS="0 1 2" OUT=runs/learn-code scripts/code/learn.sh   # an SFT and an RL run per seed

Environment: OUT (run folder, default runs/learn-<config>-<time>), DEMOS (oracle demonstrations on
train tasks, default 256), RL_SEEDS (RL seeds from one SFT run, default "0"), SEEDS (instead of
RL_SEEDS: each seed its own SFT run, `sft.seed`, and an RL run from it, so SFT's spread is
measured and RL is judged against its own seed's SFT too), THREADS (default 2), BUILTIN (overrides that turn
the config's generated tasks into the family's built-in ones, e.g. "env.options.source=null"; each
stage is then also evaluated there, reported as it is; empty: skipped), BUILTIN_SIZE (tasks of that
evaluation, default: all the built-in eval tasks up to 100), RESULT (also write the summary there,
e.g. bench/results/learn_<family>.json), EVAL_SAMPLES (sampled episodes per held-out task at
rollout.temperature besides the greedy one, default 0: the figure for a family whose greedy replies
loop, e.g. music; `rlyard eval --samples`), EVAL_GREEDY (0: no greedy episodes, only the
EVAL_SAMPLES sampled ones, `rlyard eval --no-greedy`; default 1), VERDICT (the metrics the issue's test is checked on,
default "success mean_reward"; any key of the eval results, or gate_pass / constraint_share and
their sampled_ forms). Run again with the same OUT, the recipe keeps the stages that finished
(`stage_seconds.json`) and goes on from the first that did not.

Every stage is an `rlyard` command a user could type (the recipe prints each one and runs it
through the CLI's `main` in the recipe's process); this file only runs them in order, times
them and writes `summary.json` in the shape shared by every family (DESIGN.md, "Every family
learns"): `{"commit", "machine", "stages": {"base": {"success", "mean_reward", "seconds", ...},
"sft": ..., "rl_seed0": ...}}` (with SEEDS "sft_seed0" ... instead of "sft"), all held-out; greedy, and sampled too with EVAL_SAMPLES.
"""
from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from provenance import commit  # noqa: E402  (bench/provenance.py: the code version of a result)

from rlyard.observe.store import write_atomic  # noqa: E402


def rlyard(*args: str) -> None:
    """One stage, as `rlyard ARGS` runs it: the CLI's own `main`, in this process (a process per
    stage paid 7 to 9 s of importing torch, transformers and peft again, most of a tiny recipe's
    time); its output goes straight to the terminal, and a failure stops the recipe."""
    from rlyard.cli import main

    command = f"rlyard {' '.join(shlex.quote(a) for a in args)}"
    print(f"$ {command}", flush=True)
    code = main(list(args))
    gc.collect()  # the stage's model and engine, before the next stage loads its own
    if code:
        sys.exit(f"learn: `{command}` exited {code}")


def resolved_config(config: str, overrides: list[str]) -> dict:
    from rlyard.cli import main

    printed, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
        code = main(["train", config, *overrides, "--print-config"])
    if code:
        sys.exit(f"learn: the config does not resolve:\n{errors.getvalue() or printed.getvalue()}")
    return yaml.safe_load(printed.getvalue())


def option_flags(options: dict) -> list[str]:
    """env.options as `rlyard collect -o KEY=VALUE` flags (values as flow YAML, which -o reads back)."""
    flags = []
    for key, value in (options or {}).items():
        flags += ["-o", f"{key}={yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip().removesuffix('...').strip()}"]
    return flags


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "load_at_start": load}


def stage_result(path: Path, seconds: float) -> dict:
    """An eval's results, plus where the family has a gate (`rejected`): the share of replies past
    it and the share of constraints met over all replies (a rejected one meets none). The
    checkpoint it names is written relative to the run folder: a summary carries no machine's path."""
    result = json.loads(path.read_text())
    for folder in {str(path.parent.resolve()), str(path.parent)}:
        result["model"] = str(result.get("model", "")).replace(folder + "/", "$OUT/")
    derived = {}
    for prefix in ("", "sampled_"):
        if f"{prefix}mean_rejected" in result:
            gate_pass = 1.0 - result[f"{prefix}mean_rejected"]
            derived[f"{prefix}gate_pass"] = gate_pass
            derived[f"{prefix}constraint_share"] = gate_pass * result.get(f"{prefix}mean_constraints", 0.0)
    return {"success": result.get("accuracy"), "mean_reward": result.get("mean_reward"), "seconds": round(seconds, 1),
            **result, **derived}


def spread(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0, "values": values}


def seed_spread(runs: list[dict], metrics: list[str]) -> dict:
    """Each metric's spread over seeds' stages. A metric a seed lacks counts 0 (no reply past the
    gate has no mean_constraints); one a seed did not measure (None: greedy success with
    EVAL_GREEDY=0) is left out."""
    out = {}
    for metric in dict.fromkeys(metrics):
        values = [r.get(metric, 0.0) for r in runs]
        if None not in values:
            out[metric] = spread(values)
    return out


def paired_gain(sft: list[dict], rl: list[dict], metrics: list[str]) -> dict:
    """Each metric's RL-minus-own-SFT difference over seeds (SEEDS: RL seed s starts from SFT seed
    s): the SFT runs' own spread then does not hide a gain every seed shows."""
    out = {}
    for metric in dict.fromkeys(metrics):
        pairs = [(s.get(metric, 0.0), r.get(metric, 0.0)) for s, r in zip(sft, rl)]
        if all(None not in pair for pair in pairs):
            out[metric] = spread([r - s for s, r in pairs])
    return out


def verdict(base: dict, sft: dict, rl: dict, metrics: list[str], paired: dict | None = None) -> dict:
    """The issue's test, per metric: SFT above base and RL above SFT, each by more than the
    spread over seeds, the larger of SFT's sd and RL's (one SFT run has no measured sd: then RL's).
    `sft` and `rl` are `seed_spread`s. With SEEDS (`paired`), RL above SFT also needs the mean of
    the per-seed gains above their sd. A metric the base stage lacks counts 0. With one run of each
    stage no spread is measured, and any difference would beat an sd of 0: the tests are then None
    (not measured), not a yes."""
    out = {}
    for metric in metrics:
        at_base, s, r = base.get(metric, 0.0), sft[metric], rl[metric]
        sd, measured = max(s["sd"], r["sd"]), max(len(s["values"]), len(r["values"])) > 1
        row = {"sft_minus_base": round(s["mean"] - at_base, 4), "rl_minus_sft": round(r["mean"] - s["mean"], 4),
               "sft_sd": round(s["sd"], 4), "rl_sd": round(r["sd"], 4),
               "sft_above_base": s["mean"] - at_base > sd if measured else None,
               "rl_above_sft": r["mean"] - s["mean"] > sd if measured else None}
        if paired is not None:
            gain = paired[metric]
            row.update({"rl_minus_own_sft": round(gain["mean"], 4), "rl_minus_own_sft_sd": round(gain["sd"], 4)})
            if measured:
                row["rl_above_sft"] = row["rl_above_sft"] and gain["mean"] > gain["sd"]
        out[metric] = row
    return out


def answer(test: bool | None) -> str:
    return "not measured (one run: no spread)" if test is None else "yes" if test else "NO"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    config, overrides = argv[0], argv[1:]
    started = time.strftime("%Y%m%d-%H%M%S")
    out = Path(os.environ.get("OUT") or f"runs/learn-{Path(config).stem}-{started}")
    demos, paired = int(os.environ.get("DEMOS", "256")), os.environ.get("SEEDS", "").split()
    if paired and os.environ.get("RL_SEEDS"):
        sys.exit("learn: SEEDS (an SFT and an RL run per seed) and RL_SEEDS (RL seeds from one SFT run) exclude each other: set one")
    seeds = paired or os.environ.get("RL_SEEDS", "0").split()
    sft_names = [f"sft_seed{s}" for s in paired] or ["sft"]
    builtin = shlex.split(os.environ.get("BUILTIN", ""))
    samples = ["--samples", os.environ["EVAL_SAMPLES"]] if int(os.environ.get("EVAL_SAMPLES") or 0) else []
    if os.environ.get("EVAL_GREEDY", "1") == "0":
        if not samples:
            sys.exit("learn: EVAL_GREEDY=0 needs EVAL_SAMPLES >= 1 (the sampled episodes are then the evaluation)")
        samples.append("--no-greedy")
    metrics = os.environ.get("VERDICT", "success mean_reward").split()
    greedy_only = [m for m in metrics if "--no-greedy" in samples and not m.startswith(("sampled_", "pass@"))]
    if greedy_only:
        sys.exit(f"learn: EVAL_GREEDY=0 measures no greedy episode, so VERDICT cannot use {greedy_only}: "
                 "name their sampled_ forms (e.g. sampled_mean_reward)")
    common = [f"train.threads={os.environ.get('THREADS', '2')}", *overrides]
    resolved = resolved_config(config, common)
    family, options = resolved["env"]["name"], resolved["env"].get("options") or {}
    out.mkdir(parents=True, exist_ok=True)
    first_run = out / "provenance.json"  # the commit and machine of the first invocation: a resumed recipe keeps them
    provenance = json.loads(first_run.read_text()) if first_run.exists() else {"commit": commit(), "machine": machine()}
    if not first_run.exists():
        write_atomic(first_run, json.dumps(provenance, indent=1).encode())
    code_version, host, now = provenance["commit"], provenance["machine"], commit()
    ran: list[str] = []  # the stages this invocation ran (none: it only rewrites the summary)
    done_file = out / "stage_seconds.json"  # the stages finished so far: a killed recipe run again in OUT goes on from there
    seconds: dict[str, float] = json.loads(done_file.read_text()) if done_file.exists() else {}

    def timed(name: str, *args: str) -> None:
        if name in seconds:
            print(f"== {name}: done before in {out} ({seconds[name]} s), kept", flush=True)
            return
        t0 = time.monotonic()
        ran.append(name)
        rlyard(*args)
        seconds[name] = round(time.monotonic() - t0, 1)
        write_atomic(done_file, json.dumps(seconds, indent=1).encode())

    def evaluate(stage: str, checkpoint: str | None) -> None:
        where = ["--checkpoint", checkpoint] if checkpoint else [config]
        timed(f"eval_{stage}", "eval", *where, *common, *samples, "--output", str(out / f"eval_{stage}.json"),
              "--trajectories", str(out / f"episodes_{stage}"))
        if builtin:
            size = ["--size", os.environ["BUILTIN_SIZE"]] if os.environ.get("BUILTIN_SIZE") else []
            timed(f"builtin_{stage}", "eval", *where, *common, *builtin, *size, *samples, "--output", str(out / f"builtin_{stage}.json"),
                  "--trajectories", str(out / f"episodes_builtin_{stage}"))

    print(f"== 1/4 collect: {demos} oracle demonstrations on {family} train tasks", flush=True)
    timed("collect", "collect", family, *option_flags(options), "-n", str(demos), "--out", str(out / "demos.jsonl"), "--no-progress")
    print("== 2/4 base model: held-out success", flush=True)
    evaluate("base", None)
    def sft(name: str, *seed_args: str) -> None:
        print(f"== 3/4 SFT on the demonstrations ({name}), then held-out success", flush=True)
        timed(name, "sft", str(out / "demos.jsonl"), config, *common, *seed_args, f"output.run_dir={out / name}")
        evaluate(name, str(out / name))

    if not paired:
        sft("sft")
    for seed in seeds:
        source = f"sft_seed{seed}" if paired else "sft"
        if paired:  # seed by seed: a recipe stopped after its first seed has a whole one
            sft(source, f"sft.seed={seed}")
        print(f"== 4/4 RL from the SFT weights of {source} (seed {seed}), then held-out success", flush=True)
        timed(f"rl_seed{seed}", "train", config, *common, f"model.init_from={out / source}", f"train.seed={seed}",
              f"output.run_dir={out / f'rl_seed{seed}'}", "eval.at_start=false", "eval.at_end=false")
        evaluate(f"rl_seed{seed}", str(out / f"rl_seed{seed}"))

    rl_names = [f"rl_seed{s}" for s in seeds]
    names = ["base", *sft_names, *rl_names]
    stage_seconds = {"base": seconds["eval_base"],
                     **{name: seconds[name] + seconds[f"eval_{name}"] for name in sft_names + rl_names}}
    stages = {name: stage_result(out / f"eval_{name}.json", stage_seconds[name]) for name in names}
    rl = [stages[name] for name in rl_names]
    sfts = [stages[name] for name in sft_names]
    reported = ["success", "mean_reward", *metrics]
    summary = {
        "commit": code_version, "machine": host, "config": config, "overrides": overrides, "family": family,
        "demos": demos, "rl_seeds": seeds, "eval_samples": int(samples[1]) if samples else 0, "seconds": seconds,
        "one_seed_minutes": round((seconds["collect"] + stage_seconds["base"] + stage_seconds[sft_names[0]]
                                   + stage_seconds[rl_names[0]]) / 60, 1) if seeds else None,
        "stages": stages,
        "sft": seed_spread(sfts, reported),
        "rl": seed_spread(rl, reported) if rl else {},
    }
    if paired:
        summary["rl_minus_own_sft"] = paired_gain(sfts, rl, reported)
    if ran and now != code_version:
        summary["resumed_at_commit"] = {"commit": now, "stages": ran}
    if rl:
        summary["verdict"] = verdict(stages["base"], summary["sft"], summary["rl"], metrics, summary.get("rl_minus_own_sft"))
    if builtin:
        summary["builtin"] = {"overrides": builtin, "stages": {
            name: stage_result(out / f"builtin_{name}.json", seconds[f"builtin_{name}"]) for name in names}}
    text = json.dumps(summary, indent=2)
    (out / "summary.json").write_text(text)
    if os.environ.get("RESULT"):
        Path(os.environ["RESULT"]).write_text(text + "\n")

    print(f"\nheld-out success, greedy: {stages['base']['tasks']} {family} eval tasks, commit {code_version}")
    sampled = " sampled" if samples else ""
    print(f"{'stage':<12} {'success':>8} {'reward':>7}{sampled:>8} {'turns':>6} {'seconds':>8}")
    for name, result in stages.items():
        column = f"{result['sampled_mean_reward']:>8.3f}" if samples else ""
        success = "-" if result["success"] is None else f"{result['success']:.1%}"
        reward = "-" if result["mean_reward"] is None else f"{result['mean_reward']:.3f}"
        print(f"{name:<12} {success:>8} {reward:>7}{column} {result['mean_turns']:>6.2f} {result['seconds']:>8.0f}")
    for stage, runs in (("SFT", sfts), ("RL", rl)):
        if len(runs) > 1 and "success" in summary[stage.lower()]:
            s = summary[stage.lower()]["success"]
            print(f"{stage} over seeds {' '.join(seeds)}: success mean {s['mean']:.1%}, sd {s['sd']:.1%}")
    for name, result in summary.get("builtin", {}).get("stages", {}).items():
        if result["success"] is None:
            print(f"built-in {name:<12} sampled reward {result['sampled_mean_reward']:.3f} ({result['tasks']} tasks)")
        else:
            print(f"built-in {name:<12} success {result['success']:.1%} reward {result['mean_reward']:.3f} ({result['tasks']} tasks)")
    for metric, v in summary.get("verdict", {}).items():
        own = f", RL - own SFT {v['rl_minus_own_sft']:+.3f} (sd {v['rl_minus_own_sft_sd']:.3f})" if "rl_minus_own_sft" in v else ""
        print(f"{metric}: SFT - base {v['sft_minus_base']:+.3f}, RL - SFT {v['rl_minus_sft']:+.3f}, SFT sd {v['sft_sd']:.3f}, "
              f"RL sd {v['rl_sd']:.3f}{own}: SFT above base {answer(v['sft_above_base'])}, RL above SFT {answer(v['rl_above_sft'])} "
              "(each by more than the sd)")
    print(f"one seed end to end: {summary['one_seed_minutes']} min; {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
