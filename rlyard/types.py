"""Data that crosses module boundaries: typed, flat, and shared by single- and multi-turn code.

Tensor-free on purpose: a `Trajectory` is plain lists so that it can be written to jsonl,
sent between processes and checkpointed without a torch dependency.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

Message = dict[str, Any]


@dataclass(frozen=True)
class Task:
    """One problem to solve; `n` samples of it form a GRPO group."""

    id: str  # unique within its family and split
    prompt: list[Message]  # chat messages shown to the policy
    env: str  # environment family name, e.g. "arith"
    payload: dict[str, Any] = field(default_factory=dict)  # what the verifier needs (answer, tests ...)
    metadata: dict[str, Any] = field(default_factory=dict)  # difficulty, source row ... (for logs)


@dataclass(frozen=True)
class Reward:
    """A verifier's verdict: the scalar that trains plus what explains it."""

    value: float  # the scalar reward used for advantages
    components: dict[str, float] = field(default_factory=dict)  # named parts, e.g. {"correct": 1.0}
    info: dict[str, Any] = field(default_factory=dict)  # verifier details for logs and the viewer
    infra_error: bool = False  # True when the grader itself failed: not the policy's fault


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 64
    stop_token_ids: tuple[int, ...] = ()  # generation ends after sampling any of these
    seed: int | None = None  # seeds the sampler for reproducible draws
    cache_prefix: bool = False  # more turns follow: an engine may keep the finished sequences' KV for them


@dataclass(frozen=True)
class Completion:
    """What an engine returns for one prompt sample: tokens in, tokens + logprobs out."""

    token_ids: list[int]  # sampled ids, stop token included when one was hit
    logprobs: list[float]  # log pi_behaviour(token) under the sampling distribution's logits / T
    finish_reason: str  # "stop" (a stop token) or "length" (max_new_tokens)
    policy_version: int  # engine weights version that produced every token


@dataclass
class Trajectory:
    """One episode as the learner sees it: one flat token list with a mask of what was sampled."""

    task_id: str
    group_id: str  # trajectories of the same task in the same step share it
    token_ids: list[int]  # prompt + every turn, never re-tokenized after sampling
    loss_mask: list[int]  # 1 on tokens the policy sampled, 0 on prompt / tool / env text
    behaviour_logprobs: list[float]  # per token; 0.0 where loss_mask is 0
    policy_versions: list[int]  # per token; -1 where loss_mask is 0
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    finish_reason: str = ""  # "stop", "length", "done", "infra_error" ...
    infra_error: bool = False  # dropped from its group before advantages
    completion_text: str = ""  # decoded sampled text, for logs only
    turns: int = 1
    timings: dict[str, float] = field(default_factory=dict)  # seconds: "generate", "verify" ...
    # per token: the temperature its behaviour logprob is under (sampled tokens; 1.0 elsewhere), for
    # trajectories whose turns were sampled at different temperatures (a harness behind `rlyard serve`);
    # None: every sampled token is under the run's rollout.temperature
    temperatures: list[float] | None = None
    info: dict[str, Any] = field(default_factory=dict)  # the grader's details (Reward.info): output, screenshot path ...
    # the segments of one harness episode (its history rewritten) share it, and count as one episode in
    # their group's statistics; "" = a trajectory that is its own episode
    episode_id: str = ""

    @property
    def num_sampled_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def prompt_length(self) -> int:
        """Tokens before the first sampled one (the whole prompt for single-turn)."""
        return self.loss_mask.index(1) if 1 in self.loss_mask else len(self.loss_mask)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> "Trajectory":
        return cls(**row)


@dataclass
class RunResult:
    """What `train` returns: here, not in orchestrate/run.py, so that a Ray driver unpickling it
    from the learner actor imports no torch."""

    run_dir: Path
    steps: int
    base_accuracy: float | None
    final_accuracy: float | None
    train_seconds: float
    wall_seconds: float
