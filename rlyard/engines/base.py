"""The engine contract: token ids in, sampled token ids + logprobs out, and new weights."""
from __future__ import annotations

from typing import Protocol

from rlyard.types import Completion, SamplingParams


class Engine(Protocol):
    policy_version: int

    def generate(self, prompts: list[list[int]], params: SamplingParams, n: int = 1) -> list[list[Completion]]:
        """`n` completions for each prompt, grouped per prompt."""
        ...

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        """Make the engine sample from the new policy and tag later tokens with `version`."""
        ...
