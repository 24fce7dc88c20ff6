"""FSDP2 part of bench/gpu_check.py: rlyard's sharded learner against one unsharded process.

`world` ranks (1, or 2 sharing one GPU where NCCL allows it) each shard the same seeded model
with `rlyard.train.fsdp.shard_model`, take one `Learner.train_step` on their share of a batch
(real samples of the hf engine, behaviour logprobs perturbed so that PPO's clip acts), and
gather the full gradients and weights on rank 0, which then takes the very same step with one
plain Learner on the whole batch and compares. Three cases: full fine-tuning in float32, LoRA in
float32, and full fine-tuning under FSDP's bf16 mixed precision (against the float32 step, to
bf16 precision). On a GPU one more, timed: full fine-tuning of the 0.5B shape under bf16 mixed
precision, its tokens/s and MFU. tests/test_fsdp.py is the CPU (gloo) version of the check.
"""
from __future__ import annotations

import json
import os
import socket
import time
import traceback
from pathlib import Path

import torch
import torch.multiprocessing as mp

from rlyard.config import AlgoConfig
from rlyard.train import Learner
from rlyard.types import SamplingParams, Trajectory

T = 0.8
LR = 2e-4
GRAD_RTOL = {"fp32": 1e-4, "bf16": 5e-2}  # of the largest gradient entry (the gloo test holds 1e-5 on CPU)
CASES = [("full-fp32", False, False), ("lora-fp32", True, False), ("full-bf16-mixed", False, True)]
SMALL = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)


def build_model(shape: dict, lora: bool, device: str):
    import transformers

    from rlyard.models.lora import add_lora

    torch.manual_seed(0)
    config = transformers.Qwen2Config(**shape, max_position_embeddings=4096, tie_word_embeddings=True)
    model = transformers.Qwen2ForCausalLM(config).to(torch.float32)
    if lora:
        torch.manual_seed(1)  # LoRA's A init: the same on every rank and in the reference
        model = add_lora(model, 8, 16, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    return model.to(device)


def make_batch(shape: dict, device: str, new_tokens: int, groups: int = 2, n: int = 4) -> tuple[list[Trajectory], list[float]]:
    """`groups` random prompts x `n` samples of the model itself, cut to different lengths; GRPO
    advantages of made-up 0/1 rewards; behaviour logprobs off by up to +-0.4 (some ratios clip)."""
    from rlyard.engines import HFEngine

    model = build_model(shape, False, device).eval()
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(10, shape["vocab_size"], (24 + 8 * k,), generator=g).tolist() for k in range(groups)]
    completions = HFEngine(model, 0).generate(prompts, SamplingParams(temperature=T, max_new_tokens=new_tokens, seed=11), n=n)
    batch, advantages = [], []
    for k, (prompt, group) in enumerate(zip(prompts, completions)):
        rewards = [float((i + k) % 2) for i in range(n)]
        mean = sum(rewards) / n
        std = (sum((r - mean) ** 2 for r in rewards) / (n - 1)) ** 0.5
        for i, c in enumerate(group):
            cut = max(1, new_tokens * (i + 1) // n)
            noise = ((torch.rand(cut, generator=g) - 0.5) * 0.8).tolist()
            batch.append(Trajectory(task_id=f"g{k}", group_id=f"g{k}", token_ids=prompt + c.token_ids[:cut],
                                    loss_mask=[0] * len(prompt) + [1] * cut,
                                    behaviour_logprobs=[0.0] * len(prompt) + [lp + e for lp, e in zip(c.logprobs[:cut], noise)],
                                    policy_versions=[-1] * len(prompt) + [0] * cut, reward=rewards[i]))
            advantages.append((rewards[i] - mean) / (std + 1e-6))
    return batch, advantages


def full_grads(model) -> dict[str, torch.Tensor]:
    """A collective: every rank calls it; the full gradients on every rank (CPU copies)."""
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            grads[name] = grad.detach().float().cpu().clone()
    return grads


def compare(case: str, lora: bool, bf16: bool, shape: dict, device: str, batch, advantages, got_grads, got_state, got_metrics) -> dict:
    """Rank 0: the plain learner's step on the whole batch, against what the ranks gathered."""
    model = build_model(shape, lora, device)
    before = {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}
    expected = Learner(model, AlgoConfig(lr=LR), T, micro_batch_size=4).train_step(batch, advantages, 0)
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None}
    if set(grads) != set(got_grads):
        raise AssertionError(f"{case}: gradient names differ: {sorted(set(grads) ^ set(got_grads))[:4]}")
    scale = max(g.abs().max().item() for g in grads.values())
    grad_diff = max((got_grads[n] - g).abs().max().item() for n, g in grads.items())
    state = {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}
    param_diff = max((got_state[n].float() - state[n]).abs().max().item() for n in state)
    moved = max((state[n] - before[n]).abs().max().item() for n in state)
    tolerance = GRAD_RTOL["bf16" if bf16 else "fp32"]
    norm_gap = abs(got_metrics["loss/grad_norm"] / expected["loss/grad_norm"] - 1)
    ok = grad_diff <= tolerance * scale and norm_gap <= (1e-2 if bf16 else 1e-4) and param_diff <= 2.5 * LR
    return {"case": case, "ok": ok, "max_grad_diff": grad_diff, "largest_grad": scale, "grad_rtol_allowed": tolerance,
            "grad_norm_sharded": got_metrics["loss/grad_norm"], "grad_norm_single": expected["loss/grad_norm"],
            "grad_norm_rel_gap": norm_gap, "max_param_diff_after_step": param_diff, "largest_param_move": moved,
            "loss_sharded": got_metrics["loss/policy"], "loss_single": expected["loss/policy"]}


def timed_steps(shape: dict, device: str, new_tokens: int, steps: int, peak_flops: float) -> dict:
    """Full fine-tuning of `shape` under FSDP2 bf16 mixed precision (world size 1): tokens/s, MFU."""
    from rlyard.train import fsdp

    batch, advantages = make_batch(shape, device, new_tokens, groups=4, n=8)
    model = fsdp.shard_model(build_model(shape, False, device), mixed_precision=True)
    params = sum(p.numel() for p in model.parameters())
    learner = Learner(model, AlgoConfig(lr=1e-6), T, micro_batch_size=8)
    learner.train_step(batch, advantages, 0)  # warm-up
    times, tokens = [], 0
    for step in range(steps):
        torch.cuda.synchronize()
        started = time.perf_counter()
        metrics = learner.train_step(batch, advantages, step + 1)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
        tokens = metrics["time/train_tokens_per_s"] * metrics["time/train"]
    seconds = sum(times) / len(times)
    return {"params": params, "tokens_per_step": tokens, "step_seconds": times, "tokens_per_s": tokens / seconds,
            "mfu": 6 * params * tokens / seconds / peak_flops, "mfu_formula": "6 * params * trained tokens / step seconds / peak"}


def run_rank(rank: int, world: int, port: int, backend: str, device: str, shape: dict, new_tokens: int, out: str,
             timed: dict | None) -> None:
    from rlyard.train import fsdp

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    result: dict = {"world_size": world, "backend": backend, "rank": rank, "cases": []}
    try:
        fsdp.init_process_group(backend, timeout_s=90)
        batch, advantages = make_batch(shape, device, new_tokens)
        shares = [list(range(len(batch)))[r::world] for r in range(world)]  # uneven token counts per rank
        for case, lora, bf16 in CASES:
            model = fsdp.shard_model(build_model(shape, lora, device), mixed_precision=bf16)
            mine = shares[rank]
            metrics = Learner(model, AlgoConfig(lr=LR), T, micro_batch_size=4).train_step(
                [batch[i] for i in mine], [advantages[i] for i in mine], 0)
            grads = full_grads(model)
            state = fsdp.full_state_dict(model, trainable_only=lora)
            if rank == 0:
                state = {n: state[n] for n, p in model.named_parameters() if p.requires_grad}
                result["cases"].append(compare(case, lora, bf16, shape, device, batch, advantages, grads, state, metrics))
                print(f"[fsdp] world {world} {backend} {result['cases'][-1]}", flush=True)
            del model
        if timed is not None and rank == 0:
            result["timed"] = timed_steps(timed["shape"], device, timed["new_tokens"], timed["steps"], timed["peak_flops"])
            print(f"[fsdp] timed {result['timed']}", flush=True)
        result["ok"] = all(c["ok"] for c in result["cases"])
    except Exception as e:  # recorded, not raised: the parent reports it
        result |= {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000], "traceback": traceback.format_exc()[-4000:]}
        print(f"[fsdp] rank {rank}: {result['error']}", flush=True)
    finally:
        if torch.distributed.is_initialized():
            try:
                torch.distributed.destroy_process_group()
            except Exception:
                pass
    Path(out, f"rank{rank}.json").write_text(json.dumps(result, indent=1))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fsdp_check(world: int, device: str, backend: str, shape: dict, new_tokens: int, out_dir: Path, timed: dict | None = None) -> dict:
    """Runs the ranks (in this process for world size 1, else spawned) and returns rank 0's
    result, with the other ranks' errors."""
    out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    if world == 1:
        run_rank(0, 1, port, backend, device, shape, new_tokens, str(out_dir), timed)
    else:
        mp.spawn(run_rank, args=(world, port, backend, device, shape, new_tokens, str(out_dir), None), nprocs=world, join=True)
    ranks = [json.loads(p.read_text()) for p in sorted(out_dir.glob("rank*.json"))]
    if not ranks:
        return {"ok": False, "world_size": world, "backend": backend, "error": "no rank wrote a result"}
    result = next((r for r in ranks if r["rank"] == 0), ranks[0])
    errors = {r["rank"]: r["error"] for r in ranks if r.get("error")}
    return result | ({"rank_errors": errors} if errors else {}) | {"ok": bool(result.get("ok")) and not errors}
