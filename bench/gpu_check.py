"""A GPU check in one command (scripts/gpu_check.sh runs it): what rlyard does on one GPU.

    python bench/gpu_check.py --out DIR               # on a GPU machine, ~4 minutes (one H200: 20 GRPO steps 144 s)
    python bench/gpu_check.py --cpu-dry-run --out DIR # the same code paths with a tiny model on CPU

Parts, each in its own process with its own time limit, so that one that fails or hangs does
not stop the others; DIR/gpu_check.json is rewritten after each part, DIR/gpu_check.log holds
everything they printed:

- env:   nvidia-smi, versions (Python, torch, CUDA, NCCL, transformers, peft), a bf16 matmul peak.
- grpo:  GRPO steps through rlyard's own sync loop (`rlyard.orchestrate.entry.train`, what
         `rlyard train` runs) on a random-init model of Qwen2-0.5B's shape (hidden 896, 24 layers,
         14 heads, 2 KV heads, MLP 4864, vocabulary 151936, tied head: 494M parameters) with the
         repo's tokenizer, 8 prompts x 8 samples x 32 new tokens a step, full fine-tuning: float32
         master weights, bf16 autocast in the learner, a bf16 hf engine that gets every weight
         pushed after each step. Dense reward (the share of vowels), so every step trains.
         Steps/s, tokens/s and MFU = (6 * params * trained tokens + 2 * params * generated
         tokens) / step seconds / peak (attention FLOPs left out).
- fsdp1, fsdp2: rlyard's FSDP2 learner (bench/gpu_check_fsdp.py) on NCCL with world size 1, then
         2 processes on the one GPU (NCCL may refuse two ranks on one device: recorded as is).
- vllm:  rollout.engine=vllm with a weight push (LoRA, then full weights) when vllm imports;
         else a SKIP naming why.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing it
sys.path.insert(0, str(ROOT / "bench"))
from rlyard.observe.metrics import read_metrics  # noqa: E402
DATA = ROOT / "tests" / "data"
H200_PEAK_TFLOPS = 989.0  # dense bf16, NVIDIA's datasheet for the H100 / H200 SXM
MFU_FORMULA = ("MFU = (6 * N * trained_tokens + 2 * N * generated_tokens) / seconds / peak; N = all parameters "
               "(the tied head counted once: every weight is one matmul per token), trained_tokens = tokens the learner "
               "ran forward and backward (each group's prompt once + the replies), generated_tokens = sampled reply "
               "tokens; attention FLOPs and the prompts' prefill left out")
QWEN2_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2)
PARTS = ("env", "grpo", "fsdp1", "fsdp2", "vllm")
TIMEOUTS = {"env": 90, "grpo": 270, "fsdp1": 120, "fsdp2": 90, "vllm": 300}  # seconds, on one GPU


def tiny_shape(tokenizer_size: int) -> dict:
    """The dry run's model: vocabulary larger than the tokenizer, as the 0.5B shape's is."""
    return dict(vocab_size=tokenizer_size + 64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2)


def save_random_model(path: Path, shape: dict, tokenizer, device: str) -> int:
    """A random-init Qwen2 of `shape` with `tokenizer` in `path` (a valid model.name); its parameter count."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen2Config(**shape, max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=1e6,
                                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                                      bos_token_id=tokenizer.bos_token_id)
    with torch.device(device):
        model = transformers.Qwen2ForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    model.to(torch.bfloat16).save_pretrained(path)  # loaded back as float32 master weights
    tokenizer.save_pretrained(path)
    return params


# --------------------------------------------------------------------------- parts
def part_env(args) -> dict:
    import torch

    out: dict = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
                 "cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    for name in ("transformers", "peft", "pydantic", "accelerate", "vllm"):
        spec = importlib.util.find_spec(name)
        if spec is None:
            out[name] = None
            continue
        from importlib.metadata import PackageNotFoundError, version

        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "present, version unknown"
    try:
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30)
        out["nvidia_smi"] = smi.stdout.splitlines()
        query = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        out["gpus"] = [line.strip() for line in query.stdout.splitlines() if line.strip()]
        print("\n".join(out["nvidia_smi"]), flush=True)
    except (OSError, subprocess.TimeoutExpired) as e:
        out["nvidia_smi"] = f"not run: {type(e).__name__}: {e}"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out |= {"gpu": props.name, "gpu_memory_gib": round(props.total_memory / 2**30, 1),
                "multiprocessors": props.multi_processor_count, "capability": f"{props.major}.{props.minor}",
                "nccl": ".".join(map(str, torch.cuda.nccl.version())), "cudnn": torch.backends.cudnn.version(),
                "bf16_supported": torch.cuda.is_bf16_supported()}
        n = 8192
        a, b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16), torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        out["bf16_matmul_tflops_measured"] = 10 * 2 * n**3 / (time.perf_counter() - started) / 1e12
        out["bf16_matmul_note"] = "8192^3 bf16 matmul on random data, mean of 10 after 3 warm-ups"
    out["status"] = "ok"
    return out


def part_grpo(args) -> dict:
    from rlyard.config import load_config
    from rlyard.models import load_tokenizer
    from rlyard.orchestrate.entry import train

    device = "cpu" if args.cpu_dry_run else "cuda"
    tokenizer = load_tokenizer(args.tokenizer)
    shape = tiny_shape(len(tokenizer)) if args.cpu_dry_run else QWEN2_05B
    work = Path(tempfile.mkdtemp(prefix="gpu-check-grpo-"))
    params = save_random_model(work / "model", shape, tokenizer, device)
    print(f"[grpo] random Qwen2 of {params / 1e6:.1f}M parameters, {args.steps} steps of {args.prompts} prompts x {args.n} "
          f"samples x {args.new_tokens} tokens on {device}", flush=True)
    overrides = [
        f"model.name={work / 'model'}", f"model.device={device}", "model.dtype=float32", "model.lora.enabled=false",
        "env.name=dataset", f"env.options.path={DATA / 'gsm8k_test_head30.jsonl'}", "env.options.prompt_column=question",
        f"env.reward={DATA / 'vowel_reward.py'}:vowel_share", "rollout.truncated_reward=null", "rollout.temperature=1.0",
        f"rollout.prompts_per_step={args.prompts}", f"rollout.n={args.n}", f"rollout.max_new_tokens={args.new_tokens}",
        f"train.micro_batch_size={args.n}", f"train.steps={args.steps}", "algo.lr=1e-6", "eval.size=0",
        "output.progress=false", "output.plot=false", "output.checkpoint_every=0", f"output.run_dir={work / 'run'}",
    ]
    if not args.cpu_dry_run:  # the GPU recipe of docs/configuration.md: bf16 matmuls, float32 master weights, a bf16 engine
        overrides += ["model.autocast=bfloat16", "rollout.dtype=bfloat16"]
    config = load_config(None, overrides)
    started = time.perf_counter()
    train(config, work / "run")
    wall = time.perf_counter() - started
    rows = read_metrics(work / "run" / "metrics.jsonl")
    steps = [m for m in rows if "loss/policy" in m]
    per_step = []
    for m in steps:
        generated = m["rollout/response_tokens"] * args.prompts * args.n
        trained = m["time/train_tokens_per_s"] * m["time/train"]
        flops = 6 * params * trained + 2 * params * generated
        per_step.append({"step": m["step"], "seconds": m["time/step"], "generate_s": m["time/generate"], "train_s": m["time/train"],
                         "generated_tokens": generated, "trained_tokens": trained, "tflop": flops / 1e12,
                         "reward": m["reward/mean"], "logprob_mismatch": m.get("train/logprob_mismatch"),
                         "skipped_sequences": m["train/skipped_sequences"]})
    timed = per_step[1:] or per_step  # the first step pays CUDA's and the allocator's warm-up
    seconds = sum(s["seconds"] for s in timed)
    peak = args.peak_tflops * 1e12
    flops = sum(s["tflop"] for s in timed) * 1e12
    gen_s, train_s = sum(s["generate_s"] for s in timed), sum(s["train_s"] for s in timed)
    generated, trained = sum(s["generated_tokens"] for s in timed), sum(s["trained_tokens"] for s in timed)
    out = {
        "status": "ok" if len(steps) == args.steps else "fail", "device": device, "params": params, "shape": shape,
        "steps_run": len(steps), "steps_timed": f"{timed[0]['step']}..{timed[-1]['step']}", "wall_seconds": wall,
        "steps_per_s": len(timed) / seconds, "mean_step_seconds": seconds / len(timed),
        "generated_tokens_per_s": generated / seconds, "trained_tokens_per_s": trained / seconds,
        "generate_share_of_step": gen_s / seconds, "train_share_of_step": train_s / seconds,
        "generate_tokens_per_s_in_generation": generated / gen_s, "train_tokens_per_s_in_learner": trained / train_s,
        "mfu": flops / seconds / peak, "mfu_learner_only": 6 * params * trained / train_s / peak,
        "mfu_generation_only": 2 * params * generated / gen_s / peak, "peak_tflops": args.peak_tflops, "mfu_formula": MFU_FORMULA,
        "setup": "full fine-tuning, float32 master weights" + ("" if args.cpu_dry_run else ", learner bf16 autocast, hf engine in bf16 "
                 "(every weight pushed after each step)") + f"; {args.prompts} prompts x {args.n} samples x {args.new_tokens} new "
                 "tokens, gsm8k prompts, vowel-share reward, micro-batch = one group",
        "per_step": per_step,
    }
    if device == "cuda":
        import torch

        out["gpu_memory_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if len(steps) != args.steps:
        out["error"] = f"{len(steps)} of {args.steps} steps logged"
    return out


def part_fsdp(args, world: int) -> dict:
    from gpu_check_fsdp import SMALL, fsdp_check
    from rlyard.models import load_tokenizer

    vocab = len(load_tokenizer(args.tokenizer))
    device, backend = ("cpu", "gloo") if args.cpu_dry_run else ("cuda", "nccl")
    shape = tiny_shape(vocab) if args.cpu_dry_run else SMALL | {"vocab_size": vocab}
    timed = None
    if world == 1 and not args.cpu_dry_run:
        timed = {"shape": QWEN2_05B, "new_tokens": 128, "steps": 3, "peak_flops": args.peak_tflops * 1e12}
    result = fsdp_check(world, device, backend, shape, 8 if args.cpu_dry_run else 32,
                        Path(tempfile.mkdtemp(prefix=f"gpu-check-fsdp{world}-")), timed)
    return result | {"status": "ok" if result.get("ok") else "fail", "shape": shape}


def part_vllm(args) -> dict:
    if importlib.util.find_spec("vllm") is None:
        return {"status": "skip", "reason": "vllm is not installed in this Python: the machine has no network and vLLM's "
                "wheel (with its CUDA kernels, several hundred MB) is far over the 64 MiB that can be carried to it; "
                "install it (scripts/setup_vllm.sh, VLLM_PACKAGE=vllm==0.32.0) and rerun"}
    from rlyard.config import load_config
    from rlyard.models import load_tokenizer
    from rlyard.orchestrate.entry import train

    tokenizer = load_tokenizer(args.tokenizer)
    device = "cpu" if args.cpu_dry_run else "cuda"
    work = Path(tempfile.mkdtemp(prefix="gpu-check-vllm-"))
    save_random_model(work / "model", tiny_shape(len(tokenizer)) if args.cpu_dry_run else QWEN2_05B, tokenizer, device)
    runs = {}
    for name, lora in (("lora", True), ("full", False)):
        if lora is False and args.cpu_dry_run:
            runs[name] = {"status": "skip", "reason": "full weights reach vLLM through CUDA IPC only"}
            continue
        run_dir = work / f"run-{name}"
        config = load_config(None, [
            f"model.name={work / 'model'}", f"model.device={device}", f"model.lora.enabled={str(lora).lower()}",
            "env.name=dataset", f"env.options.path={DATA / 'gsm8k_test_head30.jsonl'}", "env.options.prompt_column=question",
            f"env.reward={DATA / 'vowel_reward.py'}:vowel_share", "rollout.truncated_reward=null", "rollout.engine=vllm",
            "rollout.engine_options={max_model_len: 1024, gpu_memory_utilization: 0.3}", "rollout.prompts_per_step=2",
            "rollout.n=4", "rollout.max_new_tokens=16", "train.steps=3", "algo.lr=1e-3", "eval.size=0", "output.progress=false",
            "output.plot=false", "output.checkpoint_every=0", f"output.run_dir={run_dir}"])
        try:
            train(config, run_dir)
            steps = [m for m in read_metrics(run_dir / "metrics.jsonl") if "loss/policy" in m]
            gaps = [m.get("train/logprob_mismatch") for m in steps]
            runs[name] = {"status": "ok" if len(steps) == 3 else "fail", "logprob_mismatch_per_step": gaps}
        except Exception as e:
            runs[name] = {"status": "fail", "error": f"{type(e).__name__}: {e}"[:2000]}
    return {"status": "ok" if all(r["status"] != "fail" for r in runs.values()) else "fail", "runs": runs}


def run_part(name: str, args) -> dict:
    if name == "env":
        return part_env(args)
    if name == "grpo":
        return part_grpo(args)
    if name in ("fsdp1", "fsdp2"):
        return part_fsdp(args, int(name[-1]))
    if name == "vllm":
        return part_vllm(args)
    raise ValueError(f"unknown part {name!r} (one of {', '.join(PARTS)})")


# --------------------------------------------------------------------------- driver
def child(name: str, args, log) -> dict:
    """Part `name` in a fresh Python process, its output into the log and onto stdout."""
    result_file = Path(tempfile.mkdtemp(prefix="gpu-check-part-")) / f"{name}.json"
    command = [sys.executable, str(Path(__file__).resolve()), "--part", name, "--part-json", str(result_file),
               "--tokenizer", args.tokenizer, "--steps", str(args.steps), "--prompts", str(args.prompts), "--n", str(args.n),
               "--new-tokens", str(args.new_tokens), "--peak-tflops", str(args.peak_tflops)] + (["--cpu-dry-run"] if args.cpu_dry_run else [])
    limit = args.timeout_scale * TIMEOUTS[name]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                               env=os.environ | {"PYTHONUNBUFFERED": "1"})
    tail: list[str] = []
    timed_out = False
    deadline = started + limit
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    while True:
        if time.perf_counter() > deadline:
            timed_out = True
            os.killpg(process.pid, 9)  # the part's whole process group (spawned ranks too)
            break
        if not selector.select(timeout=1.0):
            if process.poll() is not None:
                break
            continue
        line = process.stdout.readline()
        if not line:
            break
        emit(f"  {name}| {line.rstrip()}", log)
        tail = (tail + [line.rstrip()])[-40:]
    code = process.wait()
    seconds = time.perf_counter() - started
    if timed_out:
        return {"status": "timeout", "seconds": seconds, "limit_s": limit, "output_tail": tail[-20:]}
    try:
        result = json.loads(result_file.read_text())
    except (OSError, ValueError):
        result = {"status": "fail", "error": f"the part's process exited with {code} without a result", "output_tail": tail[-20:]}
    return result | {"seconds": seconds}


def emit(text: str, log) -> None:
    print(text, flush=True)
    log.write(text + "\n")
    log.flush()


def summary_line(name: str, r: dict) -> str:
    status = r["status"].upper()
    if status == "SKIP":
        return f"SKIP {name}: {r.get('reason')}"
    if status != "OK":
        return f"{status} {name}: {r.get('error') or r.get('rank_errors') or r.get('output_tail', [''])[-1:]} ({r['seconds']:.0f} s)"
    if name == "grpo":
        return (f"OK grpo: {r['steps_run']} steps of a {r['params'] / 1e6:.0f}M model, {r['steps_per_s']:.3f} steps/s, "
                f"{r['generated_tokens_per_s']:.0f} generated + {r['trained_tokens_per_s']:.0f} trained tokens/s, MFU {r['mfu']:.2%} "
                f"(learner alone {r['mfu_learner_only']:.1%}, generation alone {r['mfu_generation_only']:.2%}) of {r['peak_tflops']:.0f} TFLOP/s")
    if name.startswith("fsdp"):
        cases = ", ".join(f"{c['case']} grad diff {c['max_grad_diff'] / c['largest_grad']:.1e} of the largest" for c in r["cases"])
        timed = r.get("timed")
        extra = f"; 0.5B bf16 step {timed['tokens_per_s']:.0f} tokens/s, MFU {timed['mfu']:.1%}" if timed else ""
        return f"OK {name}: world {r['world_size']} on {r['backend']}: {cases}{extra}"
    if name == "env":
        return f"OK env: {r.get('gpu', 'no GPU')}, torch {r['torch']} (CUDA {r['torch_cuda']}), transformers {r['transformers']}"
    return f"OK {name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu_check_out"),
                        help="folder for gpu_check.json and gpu_check.log (default: $OUT, else ./gpu_check_out)")
    parser.add_argument("--cpu-dry-run", action="store_true", help="tiny model, CPU, gloo: the code paths, not the figures")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {','.join(PARTS)}")
    default_tokenizer = ROOT / ".gpucheck" / "tokenizer"
    parser.add_argument("--tokenizer", default=str(default_tokenizer) if default_tokenizer.exists() else "embedded",
                        help="a tokenizer folder with a chat template (default: .gpucheck/tokenizer if there, else the embedded model's)")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--prompts", type=int)
    parser.add_argument("--n", type=int)
    parser.add_argument("--new-tokens", type=int)
    parser.add_argument("--peak-tflops", type=float, default=H200_PEAK_TFLOPS, help="the MFU's denominator (H200: 989 dense bf16)")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiplies every part's time limit")
    parser.add_argument("--commit", default=os.environ.get("GPU_CHECK_COMMIT"), help="the code version to record (default: git's)")
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--part-json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    dry = {"steps": 2, "prompts": 2, "n": 4, "new_tokens": 8}
    # 32 new tokens: on the H200 the hf engine took ~100 ms a token at 64 rows (its sampling runs on the CPU), so 20 steps
    # of 128 tokens ran past 270 s; 32 tokens took 5.3 s a step, the grpo part 144 s (bench/results/gpu_check.json)
    full = {"steps": 20, "prompts": 8, "n": 8, "new_tokens": 32}
    for key, value in (dry if args.cpu_dry_run else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    if args.part:  # one part, in its own process
        try:
            result = run_part(args.part, args)
        except Exception as e:
            import traceback

            traceback.print_exc()
            result = {"status": "fail", "error": f"{type(e).__name__}: {e}"[:2000]}
        args.part_json.write_text(json.dumps(result, indent=1, default=str))
        return

    from provenance import commit

    args.out.mkdir(parents=True, exist_ok=True)
    shown = {str(args.out): "DIR", args.tokenizer: Path(args.tokenizer).name}  # no folder of this machine in the record
    record = {"command": "python bench/gpu_check.py " + " ".join(shown.get(a, a) for a in sys.argv[1:]),
              "commit": args.commit or commit(), "cpu_dry_run": args.cpu_dry_run, "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "mfu_formula": MFU_FORMULA, "parts": {}, "summary": []}
    started = time.perf_counter()
    with open(args.out / "gpu_check.log", "w") as log:
        for name in args.parts.split(","):
            emit(f"== {name} (limit {args.timeout_scale * TIMEOUTS[name]:.0f} s)", log)
            record["parts"][name] = result = child(name, args, log)
            record["summary"].append(summary_line(name, result))
            emit(record["summary"][-1], log)
            record["seconds"] = time.perf_counter() - started
            (args.out / "gpu_check.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
        env, grpo = record["parts"].get("env", {}), record["parts"].get("grpo", {})
        if env.get("bf16_matmul_tflops_measured") and grpo.get("status") == "ok":  # the MFU against what a matmul reached here
            record["grpo_mfu_vs_measured_matmul_peak"] = grpo["mfu"] * args.peak_tflops / env["bf16_matmul_tflops_measured"]
            (args.out / "gpu_check.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
        emit("\n".join(["== summary", *record["summary"], f"total {record['seconds']:.0f} s"]), log)


if __name__ == "__main__":
    main()
