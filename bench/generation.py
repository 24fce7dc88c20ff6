"""rlyard's `hf` engine against transformers `generate`, same model, same prompts, same run.

    python bench/generation.py                        # batch 1, 8, 32, 64; distinct and shared prompts
    python bench/generation.py --batches 32 --new-tokens 64 --prompts shared --repeats 3
    python bench/generation.py --sides transformers rlyard   # leave out the int8 engine
    python bench/generation.py --sides rlyard vllm --vllm-python .venv-vllm/bin/python --batches 32 --repeats 3
    python bench/generation.py --dtypes float32 bfloat16 --batches 32 --repeats 3 --vllm-python .venv-vllm/bin/python

Greedy decoding with no stop token, so both produce exactly `--new-tokens` tokens per row and
the figures compare decoding alone (in training, where replies stop early, rlyard also drops
finished rows). "shared" rows are n completions of ONE prompt (rlyard prefills it once and
shares its KV cache; transformers gets the prompt n times); "distinct" rows use n prompts
(they share the chat template's system prompt, which rlyard prefills once).

Three sides: transformers `generate` (fp32), rlyard's engine in fp32, and rlyard's engine with
int8 decoding (`rollout.quantize=int8`). The int8 side's warm-up call is its fp32 calibration
batch; after timing it samples at T=0.7 and reports the mean |logprob gap| of its tokens
against an fp32 recompute (what the learner's TIS weight corrects).

A fourth side, `vllm`, is rlyard's `rollout.engine=vllm` (`VLLMEngine` over vLLM's CPU build,
with a LoRA adapter loaded as in training) on the same prompts; `vllm-base` is `vllm.LLM` with
the same settings and no LoRA (what the adapter costs). vLLM lives in its own virtualenv
(scripts/setup_vllm.sh), so that side runs as a subprocess of `--vllm-python`; without it (or
when that interpreter is missing) the side is skipped with a message. Every side also reports
its start-up: seconds from the fresh process's first import to an engine ready to sample.

`--dtypes float32 bfloat16` measures every side with its weights in each dtype, in one run (the
int8 side quantizes float32 weights, so it runs in float32 only). A bf16 matmul is native only on
a CPU with AMX or AVX512-BF16 (the script prints which); elsewhere every side emulates it.

Each measurement runs in a fresh process: one warm-up call, then `--repeats` timed calls, of
which the median is reported. Memory is that process's peak RSS (VmHWM) over the timed calls,
reset after the warm-up: "peak MB" is the whole process (model included), "+MB" the growth
above the RSS with the model loaded, i.e. what the KV cache and activations cost.
The two sides alternate (transformers, rlyard, transformers, ...) so a load spike from other
processes hits both; the load average is printed so a busy machine shows.
"""
from __future__ import annotations

import argparse
import copy
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# OMP_WAIT_POLICY: see bench/vs_trl.py (PASSIVE on a busy shared machine, unset when idle).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing it


SIDES = ("transformers", "rlyard", "rlyard-int8", "vllm", "vllm-base")
VLLM_LORA_RANK = 16
RESULT = "[generation-result] "


class _Printer:
    """The queue of a child run in another interpreter: the result goes to stdout as one line."""

    def put(self, row: dict) -> None:
        print(RESULT + json.dumps(row), flush=True)


def rss_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def measure(kind: str, batch: int, new_tokens: int, shared: bool, model_name: str, repeats: int, threads: int | None,
            dtype: str, queue) -> None:
    started_process = time.perf_counter()
    import torch

    from rlyard.engines import HFEngine
    from rlyard.models import load_model, load_tokenizer
    from rlyard.types import SamplingParams

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    tokenizer, model = load_tokenizer(model_name), load_model(model_name, dtype=dtype).eval()
    texts = [f"What is {10 + i}+{20 + 2 * i}?" for i in range(1 if shared else batch)]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True, return_dict=False) for t in texts]
    if kind == "vllm":
        from rlyard.engines.vllm_engine import VLLMEngine
        from rlyard.models import add_lora, resolve_model_path

        policy = add_lora(model, VLLM_LORA_RANK, 2 * VLLM_LORA_RANK, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
        engine = VLLMEngine(resolve_model_path(model_name), policy, dtype=dtype, lora_rank=VLLM_LORA_RANK,
                            engine_options={"max_model_len": 1024})
        # greedy: vLLM refuses n > 1 (the engine would copy one reply), so a shared prompt is sent `batch`
        # times; vLLM's prefix cache prefills it once
        rows = prompts * batch if shared else prompts
        run = lambda tokens=new_tokens: engine.generate(rows, SamplingParams(temperature=0.0, max_new_tokens=tokens))
    elif kind == "vllm-base":  # vLLM alone: no adapter, the engine's sampling settings
        import vllm

        from rlyard.engines.vllm_engine import ENV_DEFAULTS
        from rlyard.models import resolve_model_path

        for name, value in ENV_DEFAULTS.items():
            os.environ.setdefault(name, value)
        llm = vllm.LLM(model=resolve_model_path(model_name), dtype=dtype, seed=0, logprobs_mode="processed_logprobs",
                       generation_config="vllm", max_model_len=1024)
        requests = [{"prompt_token_ids": p} for p in (prompts * batch if shared else prompts)]  # greedy: n must be 1

        def run(tokens=new_tokens):
            params = vllm.SamplingParams(n=1, temperature=0.0, max_tokens=tokens, logprobs=0,
                                         ignore_eos=True, detokenize=False)
            return llm.generate(requests, params, use_tqdm=False)
    elif kind.startswith("rlyard"):
        quantize = "int8" if kind == "rlyard-int8" else "none"
        engine = HFEngine(copy.deepcopy(model) if quantize == "int8" else model, tokenizer.pad_token_id, quantize=quantize)
        run = lambda tokens=new_tokens: engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=tokens), n=batch if shared else 1)
    else:
        rows = prompts * batch if shared else prompts
        width = max(len(p) for p in rows)
        ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + list(p) for p in rows])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])

        def run(tokens=new_tokens):
            with torch.no_grad():
                return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                                      do_sample=False, pad_token_id=tokenizer.pad_token_id)
    startup_s = time.perf_counter() - started_process  # imports, model load, engine start
    run(4)  # warm-up (allocator, kernels): the full prefill, a few decode steps
    loaded_mb = rss_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak below is the timed calls' alone
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    peak_mb = rss_mb("VmHWM")
    gap = logprob_gap(engine, model, prompts, batch if shared else 1) if kind == "rlyard-int8" else None
    queue.put({"kind": kind, "dtype": dtype, "batch": batch, "shared": shared, "new_tokens": new_tokens, "seconds": seconds,
               "tokens_per_s": batch * new_tokens / statistics.median(seconds), "peak_rss_mb": peak_mb,
               "repeat_tokens_per_s": [batch * new_tokens / s for s in seconds], "startup_s": startup_s,
               "peak_over_loaded_mb": max(0.0, peak_mb - loaded_mb), "threads": torch.get_num_threads(),
               "logprob_gap": gap})


def logprob_gap(engine, fp32_model, prompts, n: int) -> float:
    """Mean |engine logprob - fp32 recompute| over tokens sampled at T=0.7 (at most 8 prompts x 4)."""
    import torch

    from rlyard.train.logprobs import continuation_logprobs
    from rlyard.types import SamplingParams

    prompts = prompts[:8]
    groups = engine.generate(prompts, SamplingParams(temperature=0.7, max_new_tokens=32, seed=0), n=min(n, 4))
    gaps = []
    with torch.no_grad():
        for prompt, group in zip(prompts, groups):
            tokens = [c.token_ids for c in group]
            exact = continuation_logprobs(fp32_model, prompt, tokens, [[1] * len(t) for t in tokens], 0.7, with_entropy=False)
            gaps += [(torch.tensor(c.logprobs) - lp).abs() for c, lp in zip(group, exact.logprobs)]
    return float(torch.cat(gaps).mean())


def run_isolated(*args, vllm_python: str | None = None) -> dict:
    if args[0].startswith("vllm"):  # in vLLM's own virtualenv: this script as a child there
        out = subprocess.run([vllm_python, __file__, "--child", json.dumps(args)], capture_output=True, text=True)
        lines = [line for line in out.stdout.splitlines() if line.startswith(RESULT)]
        if out.returncode != 0 or not lines:
            raise RuntimeError(f"the vllm side failed ({vllm_python}, exit {out.returncode}):\n{out.stderr[-3000:]}")
        return json.loads(lines[-1][len(RESULT):])
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=measure, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":  # the vllm side, run by run_isolated
        measure(*json.loads(sys.argv[2]), _Printer())
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64], help="rows per call (default 1 8 32 64)")
    parser.add_argument("--prompts", nargs="+", choices=["distinct", "shared"], default=["distinct", "shared"],
                        help="distinct prompts and/or n completions of one shared prompt (batch 1 is always distinct)")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per row (default 64)")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per measurement; the median is reported")
    parser.add_argument("--rounds", type=int, default=1, help="alternate the sides this many times; medians reported")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES),
                        help="what to measure (default: all; vllm only with --vllm-python)")
    parser.add_argument("--vllm-python", help="the vLLM virtualenv's python (scripts/setup_vllm.sh: .venv-vllm/bin/python)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"], default=["float32"],
                        help="the weights' dtype of every side, each in turn (default float32; int8 runs in float32 only)")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    sides = [side for side in SIDES if side in args.sides]
    skipped = [side for side in sides if side.startswith("vllm")]
    if skipped and not (args.vllm_python and Path(args.vllm_python).exists()):
        print(f"{' and '.join(skipped)} skipped: {'no --vllm-python' if not args.vllm_python else args.vllm_python + ' not found'} "
              "(./scripts/setup_vllm.sh makes .venv-vllm/bin/python)")
        sides = [side for side in sides if side not in skipped]
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if "bfloat16" in args.dtypes:
        from rlyard.models.loading import native_bf16

        native, why = native_bf16("cpu")
        print(f"bfloat16: {'native' if native else 'emulated'} here ({why})")
    rows = []
    for dtype, batch in ((dtype, batch) for dtype in args.dtypes for batch in args.batches):
        dtype_sides = [side for side in sides if dtype == "float32" or side != "rlyard-int8"]
        if batch == args.batches[0]:
            print(f"{'batch':>5} {'prompts':>8} {'weights':>8} " + " ".join(f"{side + ' tok/s':>18}" for side in dtype_sides)
                  + " " + " ".join(f"{'x ' + side:>13}" for side in dtype_sides[1:]) + f" {'int8 gap':>8}  peak MB (+MB) per side")
        for shared in dict.fromkeys(p == "shared" and batch > 1 for p in args.prompts):
            runs: dict[str, list[dict]] = {side: [] for side in dtype_sides}
            for _ in range(args.rounds):
                for kind, measured in runs.items():
                    measured.append(run_isolated(kind, batch, args.new_tokens, shared, args.model, args.repeats, args.threads,
                                                 dtype, vllm_python=args.vllm_python))
            medians = {kind: {**r[0], "tokens_per_s": statistics.median(x["tokens_per_s"] for x in r), "rounds": [x["tokens_per_s"] for x in r],
                              "startup_s": statistics.median(x["startup_s"] for x in r), "startup_rounds": [x["startup_s"] for x in r],
                              "all_repeats_tokens_per_s": [v for x in r for v in x["repeat_tokens_per_s"]]}
                       for kind, r in runs.items()}
            rows += list(medians.values())
            base = medians[dtype_sides[0]]["tokens_per_s"]
            gap = medians.get("rlyard-int8", {}).get("logprob_gap")
            print(f"{batch:>5} {'1 shared' if shared else 'distinct':>8} {dtype:>8} "
                  + " ".join(f"{m['tokens_per_s']:>18.1f}" for m in medians.values()) + " "
                  + " ".join(f"{m['tokens_per_s'] / base:>12.2f}x" for m in list(medians.values())[1:])
                  + f" {'-' if gap is None else format(gap, '.3f'):>8}  "
                  + " / ".join(f"{m['peak_rss_mb']:.0f} (+{m['peak_over_loaded_mb']:.0f})" for m in medians.values()), flush=True)
            print("      start-up s: " + " / ".join(f"{k} {m['startup_s']:.1f}" for k, m in medians.items())
                  + "; tok/s over every timed call (min-max): "
                  + " / ".join(f"{k} {min(m['all_repeats_tokens_per_s']):.1f}-{max(m['all_repeats_tokens_per_s']):.1f}" for k, m in medians.items()),
                  flush=True)
            for side in ("vllm", "vllm-base"):
                if side in medians and "rlyard" in medians:
                    theirs, own = medians[side], medians["rlyard"]
                    print(f"      {side} / rlyard: {theirs['tokens_per_s'] / own['tokens_per_s']:.2f}x tokens/s, start-up "
                          f"{theirs['startup_s']:.1f} s vs {own['startup_s']:.1f} s", flush=True)
    print(f"load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        from provenance import command_line, commit  # bench/ is on sys.path when a script runs

        Path(args.json).write_text(json.dumps({"command": command_line(["python", *sys.argv]), "commit": commit(),
                                               "load_average_end": os.getloadavg(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
