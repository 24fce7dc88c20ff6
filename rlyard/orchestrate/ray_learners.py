"""`orchestrate.ray.learners` > 1: one learner over N actors, the ranks of an FSDP2 group
(rlyard/train/fsdp.py, docs/fsdp.md).

Rank 0 runs the loop as always; its `c.learner` is a `GroupLearner`, which splits each call's
batch into whole-trajectory shares, sends shares 1..N-1 to the follower actors and runs share 0
itself at the same moment, so that every rank enters the same collectives in the same order
(a follower actor runs one call at a time, in the order rank 0 sent them). Advantages are
computed before the split, over whole groups; the learner's normalisation and metrics are the
whole batch's, so the step is the one a single learner takes. Weights for the rollout actors
and checkpoints are gathered on rank 0 the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlyard.orchestrate.ray_fleet import share_bounds
from rlyard.train.learner import TokenScores


def split(values, bounds: list[int]) -> list:
    if values is None:
        return [None] * (len(bounds) - 1)
    return [list(values[bounds[k]:bounds[k + 1]]) for k in range(len(bounds) - 1)]


def split_scores(scores: TokenScores | None, bounds: list[int]) -> list[TokenScores | None]:
    if scores is None:
        return [None] * (len(bounds) - 1)
    parts = [split(field, bounds) for field in (scores.old_logprobs, scores.reference_logprobs, scores.values)]
    return [TokenScores(old, ref, values) for old, ref, values in zip(*parts)]


def join_scores(parts: list[TokenScores]) -> TokenScores:
    def join(field: str):
        values = [getattr(p, field) for p in parts]
        return None if values[0] is None else [t for v in values for t in v]

    return TokenScores(join("old_logprobs"), join("reference_logprobs"), join("values"))


@dataclass
class Gathered:
    """A sharded learner's checkpoint, gathered on rank 0 (see `train.checkpoint.save_checkpoint`)."""

    model_state: dict  # model.state_dict()'s keys, full tensors (LoRA: the adapter's only)
    optimizer_state: dict  # torch.distributed.checkpoint's full optimizer state (keyed by parameter name)


def gather_checkpoint(model, optimizer, lora: bool) -> Gathered:
    """A collective: every rank calls it; rank 0 gets the full states, the others empty ones."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    from rlyard.train import fsdp

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return Gathered(fsdp.full_state_dict(model, trainable_only=lora), get_optimizer_state_dict(model, optimizer, options=options))


class GroupLearner:
    """Rank 0's learner over the ranks: the Learner's `score` / `train_step`, plus the gathers."""

    def __init__(self, local, followers: list):
        import ray

        self.ray, self.local, self.followers = ray, local, list(followers)
        self.model, self.optimizer, self.critic = local.model, local.optimizer, None

    def _bounds(self, batch) -> list[int]:
        return share_bounds(len(batch), 1 + len(self.followers))

    def _together(self, refs: list, mine):
        """Rank 0's part of a collective (`mine()`) while the followers' calls (`refs`, already
        sent) run theirs; (rank 0's result, the followers' results)."""
        result = mine()
        return result, self.ray.get(refs)

    def score(self, batch) -> TokenScores:
        shares = split(batch, self._bounds(batch))
        mine, theirs = self._together([f.score.remote(share) for f, share in zip(self.followers, shares[1:])],
                                      lambda: self.local.score(shares[0]))
        return join_scores([mine, *theirs])

    def train_step(self, batch, advantages, step: int = 0, scores: TokenScores | None = None, returns=None) -> dict[str, float]:
        bounds = self._bounds(batch)
        parts = list(zip(split(batch, bounds), split(advantages, bounds), split_scores(scores, bounds), split(returns, bounds)))
        refs = [f.train_step.remote(b, a, step, s, r) for f, (b, a, s, r) in zip(self.followers, parts[1:])]
        b, a, s, r = parts[0]
        metrics, _ = self._together(refs, lambda: self.local.train_step(b, a, step, s, r))
        return metrics  # the same global metrics on every rank

    def rollout_weights(self, takes_adapter: bool, takes_lora_factors: bool = False) -> dict:
        from rlyard.train import fsdp

        return self._together([f.rollout_weights.remote(takes_adapter) for f in self.followers],
                              lambda: fsdp.rollout_weights(self.model, takes_adapter, takes_lora_factors))[0]

    def load_checkpoint(self, path) -> dict:
        from rlyard.train.checkpoint import load_checkpoint

        return self._together([f.load_checkpoint.remote(str(path)) for f in self.followers],
                              lambda: load_checkpoint(path, self.model, self.optimizer))[0]

    def gather_checkpoint(self, lora: bool) -> Gathered:
        return self._together([f.gather_checkpoint.remote(lora) for f in self.followers],
                              lambda: gather_checkpoint(self.model, self.optimizer, lora))[0]
