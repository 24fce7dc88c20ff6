"""The environment contract: `reset` / `step` / `score`, and what a family folder exports.

An environment never sees sampling, advantages or batching; it turns a `Task` into messages,
reacts to the policy's replies and finally scores the episode. Single-turn families end after
the first reply; multi-turn families keep returning tool messages until `done`.

The contract lives apart from the families (`rlyard.envs`): it imports only `rlyard.types` and
`rlyard.environment.outcomes` (the line between the policy's failures and the platform's), so the
agent loop, the harness runner, the reward functions and every family import it, and the
families import the agent, with no circle between packages; the tool-using step is in
`rlyard.envs.tool_env`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from rlyard.environment.outcomes import policy_line
from rlyard.types import Message, Reward, Task, Trajectory


@dataclass
class StepResult:
    messages: list[Message] = field(default_factory=list)  # tool / env messages to append
    done: bool = True
    reason: str = "done"  # why the episode ended when done: "done", "no_tool_call", "submitted" ...


class Environment(Protocol):
    def reset(self, task: Task) -> list[Message]: ...

    def step(self, reply: str) -> StepResult: ...

    def score(self) -> Reward: ...

    def close(self) -> None: ...


Verifier = Callable[[str, Task], Reward]


class SingleTurnEnv:
    """One prompt, one reply, one verdict: the shape of `arith` and `countdown`."""

    def __init__(self, verify: Verifier):
        self._verify = verify
        self._task: Task | None = None
        self._reply = ""

    def reset(self, task: Task) -> list[Message]:
        self._task, self._reply = task, ""
        return list(task.prompt)

    def step(self, reply: str) -> StepResult:
        self._reply = reply
        return StepResult(done=True)

    @policy_line  # a reply the verifier cannot take scores 0 with the reason, never infra
    def score(self) -> Reward:
        if self._task is None:
            raise RuntimeError("score() called before reset()")
        return self._verify(self._reply, self._task)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Family:
    """What a family folder registers: how to make its tasks and its environments."""

    name: str
    make_tasks: Callable[..., list[Task]]  # (split: "train" | "eval", n: int, seed: int, **options)
    make_env: Callable[[], Environment]
    verify: Verifier | None  # a reply-only check; None where the grade needs the episode's state (code)
    description: str = ""
    multi_turn: bool = False  # True: episodes go through the agent loop (tools, several turns)
    validate: Callable[..., list] | None = None  # (options, task_ids, jobs, progress) -> checks with .ok (`rlyard envs validate`)
    # (task, rng: random.Random) -> the reply texts that solve it through make_env()'s env (`rlyard collect`)
    oracle: Callable[..., list[str]] | None = None
    # the reward an oracle episode must reach to be kept as a demonstration: 1 where the oracle solves the task
    # outright; lower for a family whose reward is a graded score that no answer reaches (music: quality x novelty)
    demo_min_reward: float = 1.0
    # (tasks, reply texts, sampled ids) -> one Reward per sample: grades a rollout's single-turn samples in
    # one call instead of env.score() per sample (`env.reward`'s Python functions, rlyard.rewards.with_rewards)
    score_batch: Callable[[list[Task], list[str], list[list[int]]], list[Reward]] | None = None
    # (task, the group's trajectories, each scored alone) -> the same trajectories rescored as a group, once every
    # member has finished: a length penalty anchored on the group's lengths, a judge comparing the members
    # (rlyard.orchestrate.rollout.score_groups runs it in sync, async and Ray rollouts alike)
    score_group: Callable[[Task, list[Trajectory]], list[Trajectory]] | None = None
    # (engine, tokenizer, envs, tasks, group_ids, params, limits) -> trajectories: how a multi-turn family's episodes
    # are played when not all through the agent loop (`rlyard.agent.loop.run_episodes`, the default): code's harness
    # arms (rlyard.harness.runner.play_episodes). Only a family that sets it loads the harness and its HTTP server.
    play: Callable[..., list[Trajectory]] | None = None
