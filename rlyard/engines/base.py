"""The engine contract: token ids in, sampled token ids + logprobs out, and new weights."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from rlyard.types import Completion, SamplingParams

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
