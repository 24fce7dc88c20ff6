"""The engine contract: token ids in, sampled token ids + logprobs out, and new weights."""
from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable
from typing import Protocol

from rlyard.types import Completion, SamplingParams

def fold_seed(seed: int | None, *parts: int | str) -> int | None:
    """The seed of one part of a seeded draw: `seed` with the turn, the episode, the prompt index
    folded in (None stays None: unseeded).

    The one place every sampler derives its seeds (the agent loop per turn, the openai and vllm
    engines per prompt, the harness runner per episode, the gateway per session turn): a seed
    reused across turns would restart each turn's draws from the first turn's, so episodes would
    not be independent samples of the policy. A hash, not `seed + i`, so that the seeds of
    neighbouring parts (vLLM gives a request's n samples seed + sample index) never overlap.
    Below 2**31: every client and server takes it as a seed."""
    if seed is None or not parts:
        return seed
    digest = hashlib.sha256("|".join(str(p) for p in (seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def turn_seed(seed: int | None, turn: int) -> int | None:
    """The seed of turn `turn` (0-based) of an episode or a gateway session: the first turn keeps
    the seed as given (it samples what a single-turn call with that seed samples), later ones fold
    their number in."""
    return seed if turn == 0 else fold_seed(seed, "turn", turn)


# Called once per decode step with (output index, token id, logprob) of each live row; returns the
# output indices to remove from the batch (or None). Optional: an engine may take it as the
# keyword `on_step` of `generate` (HFEngine does); callers check for the keyword, and an engine
# without it still serves every caller that does not need tokens as they are sampled.
StepHook = Callable[[list[tuple[int, int, float]]], Iterable[int] | None]


class Engine(Protocol):
    policy_version: int

    def generate(self, prompts: list[list[int]], params: SamplingParams, n: int = 1) -> list[list[Completion]]:
        """`n` completions for each prompt, grouped per prompt (an engine may also accept
        `on_step: StepHook`, see above)."""
        ...

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        """Make the engine sample from the new policy and tag later tokens with `version`."""
        ...


def accepts_hook(engine) -> bool:
    """Whether `engine.generate` takes `on_step`; a wrapper that passes hooks on (SharedEngine)
    asks the engine it wraps."""
    if getattr(engine, "passes_hooks", False):
        return accepts_hook(engine.engine)
    try:
        return "on_step" in inspect.signature(engine.generate).parameters
    except (TypeError, ValueError):
        return False
