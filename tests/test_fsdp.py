"""Two ranks under FSDP2 (gloo, CPU) take the very step one process takes on the whole batch.

One `torch.multiprocessing.spawn` of 2 processes runs every case in turn (process start-up is
most of the cost): LoRA and full fine-tuning, token-mean and seq-mean-token-mean, the batch cut
in halves, unevenly (different token and micro-batch counts per rank) and so that one rank has
only zero-advantage sequences (it trains nothing, runs idle micro-batches, yet its tokens count
in the normaliser). Each rank builds the tiny llama from the same seed; rank 0 gathers the full
state dict and the full (clipped) gradients, and they are compared with one `train_step` in
this process on the whole batch.

Tolerances. The gradients are float32 sums in another order (each rank's partial sum, then
the reduce-scatter): they agree to 1e-5 of the largest entry (measured: < 1e-9 absolute, 5e-7
relative). AdamW's first step is -lr * g / (|g| + eps), eps = 1e-8, with GRPO's default lr 2e-4:
where |g| >= 1e-7, a gradient rounding of 1e-9 moves the step by at most lr * 1e-9 * eps /
|g|^2 < 2e-7, so those weights must agree within atol 4e-6 (while the step moves them by ~lr).
Where |g| is below 1e-7, rounding can flip the step's sign (a weight off by up to 2 lr), as in
test_learner.py's micro-batch test; almost all weights still agree (mean difference < 1e-9).
A normaliser wrong by a constant factor would not show in the parameters (Adam's first step
is scale-free), so the gradients and the reported grad norm are compared too; and for the
uneven splits the gradient of the naive scheme (each rank normalises its own share, FSDP
averages) is shown to differ from the right one by far more than the tolerance.
"""
from __future__ import annotations

import copy
import os
import socket
from dataclasses import dataclass

import pytest
import torch
import torch.multiprocessing as mp

from conftest import make_tiny_llama
from rlyard.config import AlgoConfig
from rlyard.engines import HFEngine
from rlyard.models.lora import add_lora
from rlyard.orchestrate.rollout import render_prompt
from rlyard.train import Learner
from rlyard.types import SamplingParams, Trajectory
from test_learner import grpo_by_hand, make_traj, perturbed

T = 0.8
LR = 2e-4  # GRPO's default
CLIP = 0.01  # below every case's gradient norm: the compared gradients are clipped ones
PARAM_ATOL = 4e-6  # on weights whose gradient is at least NOISE_GRAD: 2% of one Adam step (lr 2e-4); the
# chunked logprobs round by batch shape, and two epochs of Adam amplified that to 1.7e-6 on Debian 3.11.2
NOISE_GRAD = 1e-7
GRAD_RTOL = 1e-5  # of the largest gradient entry
WORLD = 2
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class Case:
    lora: bool
    loss_agg: str
    split: str
    shares: list[list[Trajectory]]  # per rank
    advantages: list[list[float]]  # per rank
    options: dict  # more AlgoConfig fields; "bf16": FSDP's mixed precision instead

    @property
    def name(self) -> str:
        return f"{'lora' if self.lora else 'full'}-{self.loss_agg}-{self.split}" + "".join(f"-{k}={v}" for k, v in self.options.items())


def build_model(vocab_size: int, lora: bool):
    model = make_tiny_llama(vocab_size)
    if lora:
        torch.manual_seed(1)  # LoRA's A init: the same on every rank and in the reference
        model = add_lora(model, 8, 16, 0.0, LORA_TARGETS)
    return model


def make_learner(model, case: Case, clip: float = CLIP) -> Learner:
    # GRPO's defaults (ppo_clip, lr, one epoch, one minibatch) but a clip that always acts, so that a
    # clip by one rank's own norm would show in the gradients
    options = {k: v for k, v in case.options.items() if k != "bf16"}
    return Learner(model, AlgoConfig(lr=LR, max_grad_norm=clip, loss_agg=case.loss_agg, **options), T, micro_batch_size=2)


def train(learner: Learner, batch: list[Trajectory], advantages: list[float]) -> dict[str, float]:
    """One train step, after the scoring pass when the algorithm needs the trainer's old logprobs."""
    scores = learner.score(batch) if not learner.single_update else None
    return learner.train_step(batch, advantages, scores=scores)


def full_grads(model) -> dict[str, torch.Tensor]:
    """Every rank must call it (a gather per gradient); the full tensors on every rank."""
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            grad = p.grad
            grads[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).detach().clone()
    return grads


def run_rank(rank: int, port: int, vocab_size: int, cases: list[Case], out_dir: str) -> None:
    from rlyard.train import fsdp

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    fsdp.init_process_group("gloo")
    try:
        for k, case in enumerate(cases):
            model = fsdp.shard_model(build_model(vocab_size, case.lora), mixed_precision=case.options.get("bf16", False))
            learner = make_learner(model, case)
            metrics = train(learner, case.shares[rank], case.advantages[rank])
            grads = full_grads(model)
            state = fsdp.full_state_dict(model)
            rollout = fsdp.rollout_weights(model)
            adapter = fsdp.rollout_weights(model, takes_adapter=True) if case.lora else {}
            factors = fsdp.rollout_weights(model, takes_lora_factors=True) if case.lora else {}
            if rank == 0:
                torch.save({"metrics": metrics, "grads": grads, "state": state, "rollout": rollout, "adapter": adapter,
                            "factors": factors},
                           os.path.join(out_dir, f"{k}.pt"))
        resume_round_trip(rank, vocab_size, cases[0], out_dir)
        # Both ranks leave together: a rank that tore gloo down while rank 0 still saved died
        # once with SIGABRT ("terminate called without an active exception", the clean-clone run at e70d2f2).
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()


def resume_round_trip(rank: int, vocab_size: int, case: Case, out_dir: str) -> None:
    """A sharded learner's checkpoint as a Ray run with two learner ranks writes and resumes it:
    after one step the states are gathered on rank 0 and saved; fresh sharded learners load them
    (weights, and the optimizer state scattered back) and take step 2, which must equal step 2 of
    the learner that never stopped. A learner given the weights but a fresh optimizer takes
    another step 2 (Adam's moments count), so the check can tell a lost optimizer state."""
    from pathlib import Path

    from rlyard.orchestrate.ray_learners import gather_checkpoint
    from rlyard.train import fsdp
    from rlyard.train.checkpoint import load_checkpoint, load_sharded, save_checkpoint

    share, advantages = case.shares[rank], case.advantages[rank]
    kept = make_learner(fsdp.shard_model(build_model(vocab_size, case.lora)), case)
    train(kept, share, advantages)
    gathered = gather_checkpoint(kept.model, kept.optimizer, case.lora)
    run_dir = Path(out_dir) / "resume"
    if rank == 0:
        saved = save_checkpoint(run_dir, 1, kept.model, kept.optimizer, {}, gathered=gathered)
        assert (saved / "adapter" / "adapter_config.json").exists() == case.lora
    torch.distributed.barrier()
    checkpoint = run_dir / "checkpoints" / "step_000001"
    resumed = make_learner(fsdp.shard_model(build_model(vocab_size, case.lora)), case)
    load_checkpoint(checkpoint, resumed.model, resumed.optimizer)
    weights_only = make_learner(fsdp.shard_model(build_model(vocab_size, case.lora)), case)
    load_sharded(checkpoint, weights_only.model)
    after = {}
    for name, learner in (("kept", kept), ("resumed", resumed), ("weights_only", weights_only)):
        after[name] = {"metrics": train(learner, share, advantages), "state": fsdp.full_state_dict(learner.model, trainable_only=True)}
    if rank == 0:
        torch.save(after, os.path.join(out_dir, "resume.pt"))


def naive_step(vocab_size: int, case: Case) -> tuple[dict[str, torch.Tensor], float]:
    """What a learner that normalised each rank's share by itself would step with: the mean of the
    per-share gradients (FSDP's default averaging), clipped by that mean's norm; and the norm."""
    per_share = []
    for share, advantages in zip(case.shares, case.advantages):
        model = build_model(vocab_size, case.lora)
        if share:  # an empty share: no gradient
            make_learner(model, case, clip=1e9).train_step(share, advantages)
        per_share.append({n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in model.named_parameters() if p.requires_grad})
    mean = {n: sum(grads[n] for grads in per_share) / len(per_share) for n in per_share[0]}
    norm = torch.sqrt(sum((g ** 2).sum() for g in mean.values())).item()
    return {n: g * min(1.0, CLIP / (norm + 1e-6)) for n, g in mean.items()}, norm


def check_rollout_weights(got: dict, vocab_size: int, case: Case) -> None:
    """The weights for the engines are exactly what push_weights takes from an unsharded model
    holding the gathered state (which is compared with the single process's above)."""
    from rlyard.models.lora import lora_factors, merged_weights, trainable_state_dict

    model = build_model(vocab_size, case.lora)
    missing, unexpected = model.load_state_dict(got["state"], strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)  # tied to the embedding
    if case.lora:
        expected = {"rollout": merged_weights(model), "adapter": trainable_state_dict(model),
                    "factors": merged_weights(model) | lora_factors(model)}  # for the int8 engine: no re-pack on a push
        assert len(expected["factors"]) == 3 * len(expected["rollout"])
    else:
        expected = {"rollout": {name: p.detach() for name, p in model.named_parameters()}}
    for kind, weights in expected.items():
        assert set(got[kind]) == set(weights), (case.name, kind)
        assert all(torch.equal(got[kind][n], w) for n, w in weights.items()), (case.name, kind)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def batch(tokenizer):
    """2 prompts x 4 real samples cut to 6, 3, 5 and 1 tokens; group 1's rewards are all equal."""
    prompts = [render_prompt(tokenizer, [{"role": "user", "content": "Say something."}]),
               render_prompt(tokenizer, [{"role": "user", "content": "Name a colour, then a number below ten."}])]
    engine = HFEngine(make_tiny_llama(len(tokenizer)), tokenizer.pad_token_id)
    groups = engine.generate(prompts, SamplingParams(temperature=T, max_new_tokens=6, seed=11), n=4)
    cuts = [6, 3, 5, 1]
    trajs = [make_traj(prompts[g], c.token_ids[:k], perturbed(c.logprobs[:k], 10 * g + i), f"g{g}")
             for g, group in enumerate(groups) for i, (c, k) in enumerate(zip(group, cuts))]
    return trajs, grpo_by_hand([1, 0, 0, 1]) + grpo_by_hand([0, 1, 1, 0])


SPLITS = {  # which trajectories (0-3: group g0, 4-7: group g1) each rank holds
    "halves": ([0, 1, 4, 5], [2, 3, 6, 7]),
    "uneven": ([0], [1, 2, 3, 4, 5, 6, 7]),  # 6 tokens and 1 micro-batch on rank 0, 24 and 4 on rank 1; g0 spans both
    "idle": ([4, 5, 6], [0, 1, 2, 3, 7]),
    "empty": ([], [0, 1, 2, 3, 4, 5, 6, 7]),  # fewer trajectories than ranks: a rank gets none
}


# (LoRA, loss_agg, split, options): each aggregation and split is run with LoRA and with full fine-tuning
CASES = [(lora, agg, "halves", {}) for lora in (True, False) for agg in ("token-mean", "seq-mean-token-mean")]
CASES += [(True, "token-mean", "uneven", {}), (True, "seq-mean-token-mean", "idle", {}),
          (False, "seq-mean-token-mean", "uneven", {}), (False, "token-mean", "idle", {}), (False, "token-mean", "empty", {})]
# the KL term's reference forwards, and the scoring pass (TIS over two epochs), in step across ranks
CASES += [(True, "token-mean", "uneven", {"kl_coef": 0.05, "tis_cap": 2.0, "ppo_epochs": 2})]
# bf16 parameters in forward and backward, fp32 reduction (the GPU policy; it runs on the CPU too)
CASES += [(False, "token-mean", "uneven", {"bf16": True})]


def make_cases(trajs, advantages, idle_advantages) -> list[Case]:
    cases = []
    for lora, loss_agg, split, options in CASES:
        adv = idle_advantages if split == "idle" else advantages
        ranks = SPLITS[split]
        cases.append(Case(lora, loss_agg, split, [[trajs[i] for i in r] for r in ranks], [[adv[i] for i in r] for r in ranks], options))
    return cases


def test_two_ranks_take_the_single_process_step(tmp_path, tokenizer, batch):
    trajs, advantages = batch
    idle_advantages = grpo_by_hand([1, 0, 0, 1]) + [0.0] * 4  # rank 0 of "idle" holds only zero advantages
    cases = make_cases(trajs, advantages, idle_advantages)
    vocab_size = len(tokenizer)
    mp.spawn(run_rank, args=(free_port(), vocab_size, cases, str(tmp_path)), nprocs=WORLD, join=True)

    report = []
    for k, case in enumerate(cases):
        got = torch.load(tmp_path / f"{k}.pt", weights_only=False)
        model = build_model(vocab_size, case.lora)
        before = copy.deepcopy(model.state_dict())
        learner = make_learner(model, case)
        expected = train(learner, case.shares[0] + case.shares[1], case.advantages[0] + case.advantages[1])
        grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
        state = model.state_dict()

        assert set(got["grads"]) == set(grads), case.name
        if case.options.get("bf16"):  # the fp32 single process, to bf16 precision (measured: 1% of the largest entry)
            scale = max(g.abs().max().item() for g in grads.values())
            grad_diff = max((got["grads"][n] - g).abs().max().item() for n, g in grads.items())
            assert grad_diff <= 0.05 * scale and all(got["grads"][n].dtype == torch.float32 for n in grads), case.name
            assert got["metrics"]["loss/grad_norm"] == pytest.approx(expected["loss/grad_norm"], rel=1e-2), case.name
            report.append(f"{case.name}: max |grad diff| {grad_diff:.2e} (largest grad {scale:.2e}), grad norm "
                          f"{got['metrics']['loss/grad_norm']:.5f} vs {expected['loss/grad_norm']:.5f} in fp32")
            continue
        scale = max(g.abs().max().item() for g in grads.values())
        grad_diff = max((got["grads"][n] - g).abs().max().item() for n, g in grads.items())
        assert grad_diff <= GRAD_RTOL * scale, (case.name, grad_diff, scale)
        assert set(got["state"]) <= set(state) and len(got["state"]) > 0, case.name
        param_diff = max((got["state"][n] - state[n]).abs().max().item() for n in got["state"])
        diff = torch.cat([(got["state"][n] - state[n]).flatten().abs() for n in grads])
        grad_flat = torch.cat([g.flatten().abs() for g in grads.values()])
        signal_diff = diff[grad_flat >= NOISE_GRAD].max().item()
        assert signal_diff <= PARAM_ATOL, (case.name, signal_diff)
        updates = case.options.get("ppo_epochs", 1)  # each Adam update moves a weight by about lr at most
        assert param_diff <= 2.5 * LR * updates and diff.mean().item() < 1e-9, (case.name, param_diff)
        for n in (n for n, p in model.named_parameters() if not p.requires_grad):  # a LoRA base: untouched
            assert torch.equal(got["state"][n], before[n]), (case.name, n)
        moved = torch.cat([(state[n] - before[n]).flatten().abs() for n in grads])[grad_flat >= NOISE_GRAD]
        assert moved.median().item() > 0.5 * LR, case.name  # the step did move the weights that have a gradient
        gaps = ""
        if case.split != "halves" and not case.options:  # the check can tell the naive scheme apart: in direction or in norm
            naive, naive_norm = naive_step(vocab_size, case)
            grad_gap = max((naive[n] - g).abs().max().item() for n, g in grads.items()) / scale
            norm_gap = abs(naive_norm / expected["loss/grad_norm"] - 1)
            assert grad_gap > 100 * GRAD_RTOL or norm_gap > 0.01, (case.name, grad_gap, norm_gap)
            gaps = f"; naive scheme off by {grad_gap:.1e} of the largest grad, {norm_gap:.1%} in grad norm"
        for key in ("loss/policy", "loss/kl", "loss/grad_norm", "loss/clip_fraction", "loss/ratio_mean", "loss/entropy",
                    "train/skipped_sequences", "train/logprob_mismatch", "train/logprob_mismatch_max"):
            assert got["metrics"][key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), (case.name, key)
        assert expected["loss/grad_norm"] > 2 * CLIP  # the clip scaled the gradients compared above
        check_rollout_weights(got, vocab_size, case)
        report.append(f"{case.name}: max |grad diff| {grad_diff:.2e} (largest grad {scale:.2e}); max |param diff| {param_diff:.2e}, "
                      f"{signal_diff:.2e} where |grad| >= {NOISE_GRAD:g}{gaps}")
    print("\n".join(report))

    after = torch.load(tmp_path / "resume.pt", weights_only=False)
    kept, resumed, weights_only = after["kept"]["state"], after["resumed"]["state"], after["weights_only"]["state"]
    assert kept.keys() == resumed.keys() and len(kept) > 0
    assert all(torch.equal(kept[n], resumed[n]) for n in kept)  # step 2 after the round trip is the same step
    assert after["resumed"]["metrics"]["loss/grad_norm"] == after["kept"]["metrics"]["loss/grad_norm"]
    lost = max((kept[n] - weights_only[n]).abs().max().item() for n in kept)
    assert lost > 0.1 * LR, lost  # without the optimizer state step 2 moves the weights elsewhere
    print(f"resume: step 2 equal after the sharded round trip; without the optimizer state off by up to {lost:.2e}")
