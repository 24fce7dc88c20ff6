"""The learner: one optimisation step over a batch of scored trajectories.

`train_step` is the whole algorithm on one screen: per-token weights for the aggregation,
then per micro-batch (one shared prompt each) the policy logprobs, the PPO-clip loss, the
optional KL and entropy terms, backward; then clip and step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from rlyard.algos import kl_estimate, ppo_clip, token_weights
from rlyard.models.lora import reference_mode
from rlyard.train.logprobs import continuation_logprobs
from rlyard.types import Trajectory


@dataclass
class MicroBatch:
    indices: list[int]  # positions in the minibatch
    prefix: list[int]  # shared prompt tokens
    continuations: list[list[int]]
    masks: list[list[int]]


def make_microbatches(batch: list[Trajectory], indices: list[int], size: int) -> list[MicroBatch]:
    """Group trajectories that share their prompt, at most `size` continuations each."""
    by_prefix: dict[tuple[int, ...], list[int]] = {}
    for i in indices:
        traj = batch[i]
        by_prefix.setdefault(tuple(traj.token_ids[: traj.prompt_length]), []).append(i)
    micro = []
    for prefix, members in by_prefix.items():
        for start in range(0, len(members), size):
            chunk = members[start : start + size]
            micro.append(MicroBatch(
                chunk, list(prefix),
                [batch[i].token_ids[len(prefix):] for i in chunk], [batch[i].loss_mask[len(prefix):] for i in chunk],
            ))
    return micro


class Learner:
    def __init__(self, model, algo, temperature: float, micro_batch_size: int):
        self.model, self.algo, self.temperature, self.micro_batch_size = model, algo, temperature, micro_batch_size
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(params, lr=algo.lr, betas=(algo.beta1, algo.beta2), weight_decay=algo.weight_decay)

    def train_step(self, batch: list[Trajectory], advantages: list[float], step: int = 0) -> dict[str, float]:
        algo, started = self.algo, time.perf_counter()
        self.model.train()
        sums = {"policy": 0.0, "kl": 0.0, "entropy": 0.0, "clipped": 0.0, "ratio": 0.0, "tokens": 0.0}
        grad_norms, trained_tokens, skipped = [], 0, 0
        # Sequences with zero advantage have zero loss and gradient when no KL / entropy term is on.
        needs_all = algo.kl_coef > 0 or algo.entropy_coef != 0
        order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(algo.seed * 1_000_003 + step)).tolist()
        for _epoch in range(algo.ppo_epochs):
            for mb_indices in (order[k :: algo.minibatches] for k in range(algo.minibatches)):
                # Infra-failed episodes are not the policy's doing: no loss, no share of the normaliser.
                lengths = [0 if batch[i].infra_error else batch[i].num_sampled_tokens for i in mb_indices]
                weight = dict(zip(mb_indices, token_weights(lengths, [batch[i].group_id for i in mb_indices], algo.loss_agg, algo.loss_constant)))
                live = [i for i in mb_indices if weight[i] > 0 and (needs_all or advantages[i] != 0)]
                skipped += len(mb_indices) - len(live)
                self.optimizer.zero_grad(set_to_none=True)
                for micro in make_microbatches(batch, live, self.micro_batch_size):
                    loss, stats = self._micro_loss(batch, micro, advantages, weight)
                    loss.backward()
                    for key, value in stats.items():
                        sums[key] += value
                    trained_tokens += len(micro.prefix) + sum(len(c) for c in micro.continuations)
                grad_norm = torch.nn.utils.clip_grad_norm_([p for g in self.optimizer.param_groups for p in g["params"]], algo.max_grad_norm)
                grad_norms.append(float(grad_norm))
                self.optimizer.step()
        elapsed = time.perf_counter() - started
        tokens = max(sums["tokens"], 1.0)
        return {
            "loss/policy": sums["policy"] / tokens, "loss/kl": sums["kl"] / tokens,
            "loss/entropy": sums["entropy"] / tokens, "loss/clip_fraction": sums["clipped"] / tokens,
            "loss/ratio_mean": sums["ratio"] / tokens, "loss/grad_norm": sum(grad_norms) / len(grad_norms),
            "train/skipped_sequences": skipped / (len(batch) * algo.ppo_epochs),
            "time/train": elapsed, "time/train_tokens_per_s": trained_tokens / elapsed if elapsed > 0 else 0.0,
        }

    def _micro_loss(self, batch, micro: MicroBatch, advantages, weight) -> tuple[torch.Tensor, dict[str, float]]:
        algo = self.algo
        if algo.kl_coef > 0:
            with reference_mode(self.model):
                ref = continuation_logprobs(self.model, micro.prefix, micro.continuations, micro.masks, self.temperature, with_entropy=False)
        out = continuation_logprobs(self.model, micro.prefix, micro.continuations, micro.masks, self.temperature)
        loss = torch.zeros((), device=out.logprobs[0].device)
        stats = {"policy": 0.0, "kl": 0.0, "entropy": 0.0, "clipped": 0.0, "ratio": 0.0, "tokens": 0.0}
        for row, i in enumerate(micro.indices):
            traj, logprobs_T = batch[i], out.logprobs[row]
            old_T = torch.tensor([lp for lp, m in zip(traj.behaviour_logprobs, traj.loss_mask) if m], device=logprobs_T.device)
            advantages_T = torch.full_like(logprobs_T, float(advantages[i]))
            token_loss_T, clipped_T = ppo_clip(logprobs_T, old_T, advantages_T, algo.eps_low, algo.eps_high)
            policy_T = token_loss_T
            if algo.kl_coef > 0:
                kl_T = kl_estimate(logprobs_T, ref.logprobs[row], algo.kl_estimator)
                token_loss_T = token_loss_T + algo.kl_coef * kl_T
                stats["kl"] += float(kl_T.detach().sum())
            if algo.entropy_coef != 0:
                token_loss_T = token_loss_T - algo.entropy_coef * out.entropies[row]
            loss = loss + weight[i] * token_loss_T.sum()
            stats["policy"] += float(policy_T.detach().sum())
            stats["entropy"] += float(out.entropies[row].detach().sum())
            stats["clipped"] += float(clipped_T.sum())
            stats["ratio"] += float(torch.exp(logprobs_T.detach() - old_T).sum())
            stats["tokens"] += len(logprobs_T)
        return loss, stats
