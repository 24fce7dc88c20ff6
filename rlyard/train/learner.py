"""The learner: one optimisation step over a batch of scored trajectories.

`train_step` is the whole algorithm on one screen: per-token weights for the aggregation,
then per micro-batch (one shared prompt each) the policy logprobs, the policy loss named by
`algo.loss` (times the TIS weight when `algo.tis_cap` is set; AReaL's decoupled objective when
`algo.decoupled` is), the optional KL, entropy and value terms, backward; then clip and step.
`score` is the no-grad pass that some algorithms need before their advantages: the trainer's
own logprobs (TIS, decoupled PPO's pi_prox), the reference's (KL in the reward) and the
critic's values (GAE).

The learning rate follows `algo.lr_schedule` over optimizer steps, as transformers' schedulers
count them: a train step makes U = ppo_epochs x minibatches optimizer steps, so the schedule
runs over train.steps x U of them and warms up over algo.warmup_steps x U. It is a pure function
of (train step, update), so a resumed run continues the schedule exactly.

Over several ranks (a model from `train.fsdp.shard_model`, each rank with its share of the
batch) the aggregation weights, the micro-batch count, the gradient norm and every metric are
those of the whole batch: the step is the one a single process would take (docs/fsdp.md).
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rlyard.algos import kl_estimate, ppo_clip, token_weights
from rlyard.algos.filters import is_truncated
from rlyard.algos.policy_losses import DEFAULT_BEHAVIOUR_WEIGHT_CAP, cispo, decoupled_ppo, dual_clip, gspo, tis_weights
from rlyard.algos.value import value_loss
from rlyard.models.loading import autocast
from rlyard.models.lora import reference_mode
from rlyard.testing.kill import kill_point
from rlyard.train import fsdp
from rlyard.train.critic import Critic
from rlyard.train.logprobs import backbone_and_head, continuation_logprobs, unshared_continuation_logprobs
from rlyard.train.schedule import lr_at
from rlyard.types import Trajectory

# Per-token sums a micro-batch reports; train_step divides them by the token count.
STATS = ("policy", "kl", "entropy", "clipped", "ratio", "tokens", "tis_weight", "tis_capped", "behaviour_weight", "behaviour_masked",
         "value_loss", "value_clipped", "value", "mismatch", "mismatch_max", "greedy_masked")
# What a rank without a micro-batch left forwards so that FSDP's collectives stay in step: a zero loss.
IDLE_TOKENS = [0]


@dataclass(frozen=True)
class TokenScores:
    """The learner's no-grad pass over a batch before the update: one (L_i,) tensor per trajectory."""

    old_logprobs: list[torch.Tensor] | None  # the trainer's log pi_old (pi_prox) of each sampled token; None = not computed
    reference_logprobs: list[torch.Tensor] | None  # log pi_ref of the base model (KL in the reward); None = not computed
    values: list[torch.Tensor] | None  # the critic's V(s_t) before each sampled token (GAE); None = no critic


def sampled_behaviour_logprobs(traj: Trajectory) -> torch.Tensor:
    """(L_i,) the engine's logprobs of the sampled (loss_mask == 1) tokens."""
    return torch.tensor([lp for lp, m in zip(traj.behaviour_logprobs, traj.loss_mask) if m], dtype=torch.float32)


@dataclass
class MicroBatch:
    indices: list[int]  # positions in the minibatch
    prefix: list[int]  # shared prompt tokens
    continuations: list[list[int]]
    masks: list[list[int]]
    temperatures: list[list[float] | None] | None = None  # per continuation: its tokens' own temperatures, if recorded


def check_temperatures(traj: Trajectory) -> None:
    """A trajectory's own temperatures must cover its tokens and be >= 0 where sampled (0: a greedy turn)."""
    if traj.temperatures is None:
        return
    if len(traj.temperatures) != len(traj.token_ids):
        raise ValueError(f"trajectory {traj.task_id}/{traj.group_id}: {len(traj.temperatures)} temperatures for {len(traj.token_ids)} tokens")
    if any(t < 0 for t, m in zip(traj.temperatures, traj.loss_mask) if m):
        raise ValueError(f"trajectory {traj.task_id}/{traj.group_id}: a sampled token's temperature must be >= 0 "
                         "(0: a greedy turn, left out of the loss)")


def greedy_tokens(traj: Trajectory) -> torch.Tensor:
    """(L_i,) True on the sampled tokens of greedy (T = 0) turns: an argmax is no draw from
    softmax(logits), so they stay out of every loss term (a harness asked for T = 0)."""
    if traj.temperatures is None:
        return torch.zeros(traj.num_sampled_tokens, dtype=torch.bool)
    return torch.tensor([t == 0 for t, m in zip(traj.temperatures, traj.loss_mask) if m], dtype=torch.bool)


def make_microbatches(batch: list[Trajectory], indices: list[int], size: int) -> list[MicroBatch]:
    """Group trajectories that share their prompt, at most `size` continuations each."""
    by_prefix: dict[tuple[int, ...], list[int]] = {}
    for i in indices:
        traj = batch[i]
        check_temperatures(traj)
        by_prefix.setdefault(tuple(traj.token_ids[: traj.prompt_length]), []).append(i)
    micro = []
    for prefix, members in by_prefix.items():
        for start in range(0, len(members), size):
            chunk = members[start : start + size]
            recorded = [batch[i].temperatures for i in chunk]
            micro.append(MicroBatch(
                chunk, list(prefix),
                [batch[i].token_ids[len(prefix):] for i in chunk], [batch[i].loss_mask[len(prefix):] for i in chunk],
                [[x or 1.0 for x in t[len(prefix):]] if t is not None else None for t in recorded]
                if any(t is not None for t in recorded) else None,
            ))
    return micro


def is_checkpointing(model) -> bool:
    """Whether a forward with gradients recomputes its layers in backward (`model.gradient_checkpointing`)."""
    return model.training and torch.is_grad_enabled() and any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


class Learner:
    def __init__(self, model, algo, temperature: float, micro_batch_size: int, max_new_tokens: int | None = None,
                 autocast_dtype: torch.dtype | None = None, total_steps: int | None = None, process_group=None):
        """`total_steps`: the run's train steps (train.steps), over which linear and cosine schedules decay.
        `process_group`: the data-parallel ranks of a model from `fsdp.shard_model` (None: the default group)."""
        self.model, self.algo, self.temperature, self.micro_batch_size = model, algo, temperature, micro_batch_size
        self.group = None  # None: one process, the whole batch
        if fsdp.is_sharded(model):
            self.group = process_group or torch.distributed.group.WORLD
            fsdp.sum_gradients(model)  # the weights below divide by the whole batch: FSDP must not average too
            if algo.advantage == "gae":
                raise ValueError("advantage gae over several ranks: the critic is not sharded or reduced yet (docs/fsdp.md)")
        self.autocast_dtype = autocast_dtype  # model.autocast: the forward's matmuls (and so the backward's) in bf16
        if algo.lr_schedule != "constant" and total_steps is None:
            raise ValueError(f"algo.lr_schedule={algo.lr_schedule} decays over the run: pass total_steps (train.steps)")
        self.total_steps = total_steps
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(params, lr=algo.lr, betas=(algo.beta1, algo.beta2), weight_decay=algo.weight_decay)
        # loss_agg=constant divides by L_max: the response budget unless algo.loss_constant says otherwise
        self.loss_constant = algo.loss_constant or max_new_tokens
        # decoupled PPO: tokens whose pi_prox / pi_behav exceeds the cap get no loss (unset = AReaL's 5)
        self.behaviour_weight_cap = algo.behaviour_weight_cap if algo.behaviour_weight_cap is not None else DEFAULT_BEHAVIOUR_WEIGHT_CAP
        self.critic: Critic | None = None
        if algo.advantage == "gae":
            head = backbone_and_head(model)[1]
            self.critic = Critic(head.weight.shape[1], algo.value_lr, (algo.beta1, algo.beta2), algo.max_grad_norm, head.weight.device)

    def train_step(
        self, batch: list[Trajectory], advantages: Sequence[float | torch.Tensor], step: int = 0,
        scores: TokenScores | None = None, returns: Sequence[torch.Tensor] | None = None,
    ) -> dict[str, float]:
        """`advantages[i]`: a float per sequence or a (L_i,) tensor per sampled token. `scores`: from
        `score(batch)`, needed by TIS and the critic; `returns`: the critic's value targets (GAE)."""
        algo, started = self.algo, time.perf_counter()
        self._check_inputs(scores, returns)
        self.model.train()
        advantages_T = [per_token(a, traj) for a, traj in zip(advantages, batch)]
        lengths = [self.trained_length(traj) for traj in batch]
        sums, grad_norms, trained_tokens, skipped = dict.fromkeys(STATS, 0.0), [], 0, 0
        # Every policy loss here is linear in A: a zero-advantage sequence has zero loss and gradient,
        # so it is skipped unless a KL, entropy or value term still needs it.
        needs_all = (algo.kl_coef > 0 and not algo.kl_in_reward) or algo.entropy_coef != 0 or self.critic is not None
        order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(algo.seed * 1_000_003 + step)).tolist()
        for _epoch in range(algo.ppo_epochs):
            for mb_indices in (order[k :: algo.minibatches] for k in range(algo.minibatches)):
                # Infra-failed episodes (and truncated ones under overlong_filter): no loss, no share of the normaliser.
                weights = self._token_weights([lengths[i] for i in mb_indices], [batch[i].group_id for i in mb_indices],
                                              [batch[i].episode_id for i in mb_indices])
                weight = dict(zip(mb_indices, weights))
                live = [i for i in mb_indices if weight[i] > 0 and (needs_all or bool(advantages_T[i].any()))]
                skipped += len(mb_indices) - len(live)
                self._zero_grad()
                micros = make_microbatches(batch, live, self.micro_batch_size)
                idle = self._idle_passes(len(micros))  # before any forward: agreeing on it is a collective too
                for micro in micros:
                    loss, stats = self._micro_loss(batch, micro, advantages_T, weight, scores, returns)
                    loss.backward()
                    for key, value in stats.items():
                        sums[key] = max(sums[key], value) if key == "mismatch_max" else sums[key] + value
                    trained_tokens += len(micro.prefix) + sum(len(c) for c in micro.continuations)
                for _ in range(idle):
                    self._idle_pass()
                lr = self.lr_at(step, len(grad_norms))
                grad_norms.append(self._step(lr))
        size = len(batch)
        if self.group is not None:
            totals = fsdp.reduce_sums(sums | {" skipped": skipped, " tokens": trained_tokens, " size": size}, self.group, ("mismatch_max",))
            skipped, trained_tokens, size = totals.pop(" skipped"), totals.pop(" tokens"), totals.pop(" size")
            sums = totals
        elapsed = time.perf_counter() - started
        metrics = self._metrics(sums, grad_norms)
        return metrics | {
            "train/skipped_sequences": skipped / (size * algo.ppo_epochs), "train/lr": lr,
            "time/train": elapsed, "time/train_tokens_per_s": trained_tokens / elapsed if elapsed > 0 else 0.0,
        }

    def lr_at(self, step: int, update: int = 0) -> float:
        """The policy's learning rate in update `update` (0-based, of ppo_epochs x minibatches) of
        train step `step` (0-based). The critic keeps algo.value_lr."""
        algo, per_step = self.algo, self.algo.ppo_epochs * self.algo.minibatches
        return lr_at(step * per_step + update, (self.total_steps or 0) * per_step, algo.lr, algo.lr_schedule, algo.warmup_steps * per_step)

    def trained_length(self, traj: Trajectory) -> int:
        """Sampled tokens that enter the loss: none for an infra failure or, with overlong_filter, a
        truncated sample (a reply cut at max_new_tokens; an episode out of its token budget or with
        a reply cut at the per-turn cap: `filters.is_truncated`)."""
        if traj.infra_error or (self.algo.overlong_filter and is_truncated(traj.finish_reason)):
            return 0
        return traj.num_sampled_tokens - int(greedy_tokens(traj).sum())  # greedy turns' tokens train nothing

    @torch.no_grad()
    def score(self, batch: list[Trajectory]) -> TokenScores:
        """The no-grad pass before advantages, doing only what the algorithm needs: the trainer's old
        logprobs (TIS, decoupled PPO; GAE's pass gives them for free), the reference's (KL in the reward), V(s_t) (GAE)."""
        algo, critic = self.algo, self.critic
        want_old = ((algo.tis_cap is not None or algo.decoupled) and not self.single_update) or critic is not None
        want_ref = algo.kl_in_reward and algo.kl_coef > 0
        empty = [torch.zeros(0) for _ in batch]
        old, ref, values = list(empty), list(empty), list(empty)
        if want_old or want_ref:
            was_training = self.model.training
            self.model.eval()  # no dropout: the old logprobs are those of the policy itself
            try:
                micros = make_microbatches(batch, [i for i, t in enumerate(batch) if t.num_sampled_tokens], self.micro_batch_size)
                for _ in range(self._idle_passes(len(micros))):  # the same forwards as every other rank
                    if want_old:
                        self._logprobs(self._idle_micro(), with_entropy=False)
                    if want_ref:
                        self._reference(self._idle_micro())
                for micro in micros:
                    if want_old:
                        out = self._logprobs(micro, with_entropy=False, with_hidden=critic is not None)
                        for row, i in enumerate(micro.indices):
                            old[i] = out.logprobs[row]
                            if critic is not None:
                                values[i] = critic.values(out.hidden[row])
                    if want_ref:
                        reference = self._reference(micro)
                        for row, i in enumerate(micro.indices):
                            ref[i] = reference.logprobs[row]
            finally:
                self.model.train(was_training)
        return TokenScores(old if want_old else None, ref if want_ref else None, values if critic is not None else None)

    @property
    def single_update(self) -> bool:
        """One optimizer step per batch: the trainer's old logprobs are those of the update's own
        forward pass (detached), so `score` need not compute them (TRL does the same)."""
        return self.algo.ppo_epochs == 1 and self.algo.minibatches == 1

    def _check_inputs(self, scores: TokenScores | None, returns) -> None:
        needs_old = (self.algo.tis_cap is not None or self.algo.decoupled) and not self.single_update
        if needs_old and (scores is None or scores.old_logprobs is None):
            raise ValueError("algo.tis_cap and algo.decoupled need the trainer's old logprobs: pass scores=learner.score(batch)")
        if self.critic is not None and (scores is None or scores.values is None or returns is None):
            raise ValueError("advantage gae trains a critic: pass scores=learner.score(batch) and the GAE returns")

    def _logprobs(self, micro: MicroBatch, with_entropy: bool = True, with_hidden: bool = False, entropy_grad: bool = False):
        with autocast(self.autocast_dtype, next(self.model.parameters()).device):
            if self.group is not None:
                forward = fsdp.sharded_logprobs
            else:
                forward = unshared_continuation_logprobs if is_checkpointing(self.model) else continuation_logprobs
            return forward(self.model, micro.prefix, micro.continuations, micro.masks, self.temperature,
                           with_entropy=with_entropy, with_hidden=with_hidden, token_temperatures=micro.temperatures,
                           entropy_grad=entropy_grad)

    def _reference(self, micro: MicroBatch):
        with reference_mode(self.model):
            return self._logprobs(micro, with_entropy=False)

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if self.critic is not None:
            self.critic.zero_grad()

    def _step(self, lr: float) -> float:
        """Clip and step the policy at `lr` (and the critic, on its own norm); returns the policy's gradient norm."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr  # also overrides the rate a resumed optimizer's state_dict brought back
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        # A batch with no signal (every group's rewards equal) leaves None gradients, so AdamW skips
        # it: no step on stale momentum. TRL backpropagates the zero loss and steps; doing that here
        # sent seed 1 of bench/vs_trl.py into a reward-0 dead end, as it does TRL's own seeds 5 and 6
        # (docs/benchmarks.md).
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.algo.max_grad_norm)  # sharded: the global norm (a DTensor)
        kill_point("update")  # tests/test_kill_resume.py: gradients computed, not applied
        self.optimizer.step()
        if self.critic is not None:
            self.critic.step()
        return fsdp.full_value(grad_norm)

    def _token_weights(self, lengths: list[int], group_ids: list[str], episode_ids: list[str]) -> list[float]:
        """`algo.loss_agg`'s weights (a harness episode's segments share its one); over several
        ranks, this rank's share of the whole minibatch's (its segments share it across ranks too)."""
        if self.group is not None:
            return fsdp.global_token_weights(lengths, group_ids, self.algo.loss_agg, self.loss_constant, self.group, episode_ids)
        return token_weights(lengths, group_ids, self.algo.loss_agg, self.loss_constant, episode_ids)

    def _idle_passes(self, count: int) -> int:
        """How many zero-loss micro-batches this rank adds so that every rank runs as many as the busiest."""
        return 0 if self.group is None else fsdp.max_count(count, self.group) - count

    def _idle_micro(self) -> MicroBatch:
        return MicroBatch([], list(IDLE_TOKENS), [list(IDLE_TOKENS)], [[1]])

    def _idle_pass(self) -> None:
        """The forwards and the backward of one micro-batch (as `_micro_loss` runs them), with a zero loss."""
        if self.algo.kl_coef > 0 and not self.algo.kl_in_reward:
            self._reference(self._idle_micro())
        (0.0 * self._logprobs(self._idle_micro()).logprobs[0].sum()).backward()

    def _micro_loss(self, batch, micro: MicroBatch, advantages_T, weight, scores, returns) -> tuple[torch.Tensor, dict[str, float]]:
        algo, critic = self.algo, self.critic
        ref = self._reference(micro) if algo.kl_coef > 0 and not algo.kl_in_reward else None
        # the entropy carries gradients only when it is in the loss; otherwise it is a metric
        out = self._logprobs(micro, with_hidden=critic is not None, entropy_grad=algo.entropy_coef != 0)
        loss = torch.zeros((), device=out.logprobs[0].device)
        stats = dict.fromkeys(STATS, 0.0)
        trainer_old = scores.old_logprobs if scores is not None else None
        for row, i in enumerate(micro.indices):
            logprobs_T = out.logprobs[row]
            token_loss_T = self._policy_terms(logprobs_T, batch[i], advantages_T[i], trainer_old and trainer_old[i], stats)
            if ref is not None:
                kl_T = kl_estimate(logprobs_T, ref.logprobs[row], algo.kl_estimator)
                token_loss_T = token_loss_T + algo.kl_coef * kl_T
                stats["kl"] += float(kl_T.detach().sum())
            if algo.entropy_coef != 0:
                token_loss_T = token_loss_T - algo.entropy_coef * out.entropies[row]
            if critic is not None:
                # The head reads detached features: this term's gradient reaches the value head only.
                values_T = critic.values(out.hidden[row])
                value_T, value_clipped_T = value_loss(values_T, scores.values[i].to(values_T.device), returns[i].to(values_T.device), algo.value_clip)
                token_loss_T = token_loss_T + value_T
                stats["value_loss"] += float(value_T.detach().sum())
                stats["value_clipped"] += float(value_clipped_T.sum())
                stats["value"] += float(values_T.detach().sum())
            greedy_T = greedy_tokens(batch[i]).to(token_loss_T.device)
            if greedy_T.any():  # greedy turns: no loss, no gradient (counted in train/greedy_masked_tokens)
                token_loss_T = token_loss_T.masked_fill(greedy_T, 0.0)
                stats["greedy_masked"] += float(greedy_T.sum())
            loss = loss + weight[i] * token_loss_T.sum()
            stats["entropy"] += float(out.entropies[row].detach().sum())
            stats["tokens"] += len(logprobs_T)
        return loss, stats

    def _policy_terms(self, logprobs_T, traj: Trajectory, advantages_T, trainer_old_T, stats) -> torch.Tensor:
        """The per-token policy loss of one sequence: TIS-weighted when algo.tis_cap is set, decoupled
        PPO when algo.decoupled is."""
        algo, device = self.algo, logprobs_T.device
        behaviour_T = sampled_behaviour_logprobs(traj).to(device)
        # With TIS or decoupled PPO the ratio is centred on the trainer's own old logprobs (pi_prox);
        # the engine's (pi_behav, possibly several versions old) enter only through the weight.
        off_policy = algo.tis_cap is not None or algo.decoupled
        # pi_old: the scoring pass's logprobs, or with a single update per batch the update's own
        # forward (detached). In a later epoch without a scoring pass there is none.
        if trainer_old_T is None and self.single_update:
            trainer_old_T = logprobs_T.detach()
        if trainer_old_T is not None:
            trainer_old_T = trainer_old_T.to(device)
            gap_T = (trainer_old_T - behaviour_T).abs()  # engine vs trainer: what TIS corrects
            stats["mismatch"] += float(gap_T.sum())
            stats["mismatch_max"] = max(stats["mismatch_max"], float(gap_T.max()) if len(gap_T) else 0.0)
        old_T = trainer_old_T if off_policy else behaviour_T
        if algo.decoupled:
            policy_T, clipped_T = decoupled_ppo(logprobs_T, old_T, behaviour_T, advantages_T.to(device), algo.eps_low, algo.eps_high,
                                                self.behaviour_weight_cap)
            weight_T = torch.exp(old_T - behaviour_T)
            stats["behaviour_weight"] += float(weight_T.sum())
            stats["behaviour_masked"] += float((weight_T > self.behaviour_weight_cap).sum())
        else:
            policy_T, clipped_T = self._policy_loss(logprobs_T, old_T, advantages_T.to(device))
        if algo.tis_cap is not None:
            tis_T = tis_weights(old_T, behaviour_T, algo.tis_cap)
            policy_T = tis_T * policy_T
            stats["tis_weight"] += float(tis_T.sum())
            stats["tis_capped"] += float(((old_T - behaviour_T) > math.log(algo.tis_cap)).sum())
        stats["policy"] += float(policy_T.detach().sum())
        stats["clipped"] += float(clipped_T.sum())
        stats["ratio"] += float(torch.exp(logprobs_T.detach() - old_T).sum())
        return policy_T

    def _policy_loss(self, logprobs_T, old_T, advantages_T) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token loss and 0/1 clipped flags of one sequence, for the loss named by algo.loss."""
        algo = self.algo
        if algo.loss == "ppo_clip":
            return ppo_clip(logprobs_T, old_T, advantages_T, algo.eps_low, algo.eps_high)
        elif algo.loss == "dual_clip":
            return dual_clip(logprobs_T, old_T, advantages_T, algo.eps_low, algo.eps_high, algo.dual_clip_c)
        elif algo.loss == "gspo":
            one_sequence_T = torch.zeros(len(logprobs_T), dtype=torch.long, device=logprobs_T.device)
            return gspo(logprobs_T, old_T, advantages_T, one_sequence_T, algo.eps_low, algo.eps_high)
        elif algo.loss == "cispo":
            return cispo(logprobs_T, old_T, advantages_T, algo.eps_low, algo.eps_high)
        raise ValueError(f"unknown policy loss {algo.loss!r}")

    def _metrics(self, sums: dict[str, float], grad_norms: list[float]) -> dict[str, float]:
        tokens = max(sums["tokens"], 1.0)
        metrics = {
            "loss/policy": sums["policy"] / tokens, "loss/kl": sums["kl"] / tokens,
            "loss/entropy": sums["entropy"] / tokens, "loss/clip_fraction": sums["clipped"] / tokens,
            "loss/ratio_mean": sums["ratio"] / tokens, "loss/grad_norm": sum(grad_norms) / len(grad_norms),
        }
        metrics |= {"train/logprob_mismatch": sums["mismatch"] / tokens, "train/logprob_mismatch_max": sums["mismatch_max"]}
        if sums["greedy_masked"]:
            metrics["train/greedy_masked_tokens"] = sums["greedy_masked"]
        if self.algo.tis_cap is not None:
            metrics |= {"train/tis_weight_mean": sums["tis_weight"] / tokens, "train/tis_capped_fraction": sums["tis_capped"] / tokens}
        if self.algo.decoupled:
            metrics |= {"train/behaviour_weight_mean": sums["behaviour_weight"] / tokens,
                        "train/behaviour_masked_fraction": sums["behaviour_masked"] / tokens}
        if self.critic is not None:
            metrics |= {"loss/value": sums["value_loss"] / tokens, "loss/value_clip_fraction": sums["value_clipped"] / tokens,
                        "train/value_mean": sums["value"] / tokens}
        return metrics


def per_token(advantage: float | torch.Tensor | Sequence[float], traj: Trajectory) -> torch.Tensor:
    """(L_i,) advantages of one trajectory's sampled tokens: a per-sequence value is broadcast."""
    length = traj.num_sampled_tokens
    if isinstance(advantage, (int, float)):
        return torch.full((length,), float(advantage))
    advantage_T = torch.as_tensor(advantage, dtype=torch.float32).detach()
    if advantage_T.dim() == 0:
        return advantage_T.expand(length).clone()
    if advantage_T.shape != (length,):
        raise ValueError(f"per-token advantages of {traj.group_id!r} have shape {tuple(advantage_T.shape)}, expected ({length},)")
    return advantage_T
