"""The Ray backend's actors: rollout workers (an engine and the agent loop) and grader workers
(the environments: sandboxes, verifiers), plus the learner, which runs the ordinary loop.

Each is a plain class here; `rlyard.orchestrate.ray_backend` wraps it with `ray.remote` and the
resources of `orchestrate.ray` when it launches the run, so importing this module needs no Ray.
Every actor builds its own pieces from the run's config (a config dict crosses the wire, not a
model), and answers `ready()` with an incarnation id that changes when Ray restarts it: the
learner's fleet compares it with the one it knows to find a rollout actor that lost its weights.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
from dataclasses import replace
from pathlib import Path

from rlyard.config import RunConfig
from rlyard.environment import Family, StepResult
from rlyard.orchestrate.ray_fleet import takes_adapter
from rlyard.types import Reward, SamplingParams, Task, Trajectory


def actor_config(config_data: dict, cpus: float) -> RunConfig:
    """An actor's copy of the run config: no held-out tasks (only the learner evaluates), and as
    many torch threads as the actor has CPUs unless train.threads says otherwise."""
    config = RunConfig.model_validate(config_data)
    threads = config.train.threads or max(1, int(cpus))
    return config.model_copy(update={"eval": config.eval.model_copy(update={"size": 0}),
                                     "train": config.train.model_copy(update={"threads": threads})})


class GraderActor:
    """Hosts environments by id; a rollout actor's `RemoteEnv` calls them across the wire, so the
    sandboxes and verifiers run where this actor is placed (CPU nodes)."""

    def __init__(self, config_data: dict, cpus: float):
        from rlyard.orchestrate.family import run_family  # no torch: a grader hosts environments only

        self.family = run_family(actor_config(config_data, cpus))
        self.envs: dict[int, object] = {}
        self.ids = itertools.count()
        self.lock = threading.Lock()
        self.incarnation = uuid.uuid4().hex

    def ready(self) -> str:
        return self.incarnation

    def open(self) -> int:
        with self.lock:
            env_id = next(self.ids)
        self.envs[env_id] = self.family.make_env()
        return env_id

    def call(self, env_id: int, method: str, *args):
        return getattr(self.envs[env_id], method)(*args)

    def attribute(self, env_id: int, name: str) -> tuple[bool, object]:
        """(True, None) for a method, (False, value) for a plain attribute; AttributeError if absent."""
        value = getattr(self.envs[env_id], name)
        return (True, None) if callable(value) else (False, value)

    def close(self, env_id: int) -> None:
        env = self.envs.pop(env_id, None)
        if env is not None:
            env.close()

    def score_batch(self, tasks: list[Task], texts: list[str], ids: list[list[int]]) -> list[Reward]:
        return self.family.score_batch(tasks, texts, ids)


class GraderLost(RuntimeError):
    """The grader actor hosting an episode's environment died: the episode's state is gone."""


class RemoteEnv:
    """An environment living in a grader actor, behind the Environment contract."""

    def __init__(self, grader, on_lost):
        import ray

        self._ray, self._grader, self._on_lost = ray, grader, on_lost
        self._id = self._remote("open")

    def _remote(self, method: str, *args):
        try:
            return self._ray.get(getattr(self._grader, method).remote(*args))
        except self._ray.exceptions.RayActorError as error:  # includes the actor's death mid-call
            self._on_lost()
            raise GraderLost(f"the grader actor died during {method}: {error}") from None

    def reset(self, task: Task):
        return self._remote("call", self._id, "reset", task)

    def step(self, reply: str) -> StepResult:
        return self._remote("call", self._id, "step", reply)

    def score(self) -> Reward:
        return self._remote("call", self._id, "score")

    def close(self) -> None:
        with contextlib.suppress(GraderLost):
            self._remote("close", self._id)

    def __getattr__(self, name: str):
        if name.startswith("_") or name == "workspace":
            # a harness arm drives the workspace's files from this process: not across nodes
            raise AttributeError(name)
        is_method, value = self._remote("attribute", self._id, name)
        if not is_method:
            return value
        return lambda *args: self._remote("call", self._id, name, *args)


def remote_family(family: Family, graders: list, on_lost) -> Family:
    """`family` with its environments (and batch grader) in the grader actors, round-robin."""
    import ray

    turn = itertools.count()

    def pick():
        return graders[next(turn) % len(graders)]

    def score_batch(tasks, texts, ids):
        try:
            return ray.get(pick().score_batch.remote(tasks, texts, ids))
        except ray.exceptions.RayActorError as error:
            on_lost()
            raise GraderLost(f"the grader actor died while grading: {error}") from None

    return replace(family, make_env=lambda: RemoteEnv(pick(), on_lost),
                   score_batch=score_batch if family.score_batch is not None else None)


class RolloutActor:
    """An engine and the agent loop: plays whole groups with the weights the learner last sent.

    The engine sits behind the same `SharedEngine` as a local async run, so the concurrent
    `play` calls of the learner's rollout threads and a weight update in between are safe, and
    `orchestrate.partial_rollouts=false` pins a group's weights exactly as it does locally.
    """

    def __init__(self, config_data: dict, cpus: float, graders: list):
        from rlyard.orchestrate.setup import build
        from rlyard.orchestrate.workers import SharedEngine

        config = actor_config(config_data, cpus)
        # vLLM with LoRA loads an adapter, not merged weights: the actor keeps its own copy of it
        self.takes_adapter = takes_adapter(config)
        c = build(config, train=False, adapter=self.takes_adapter)
        self.config, self.tokenizer, self.family, self.model = config, c.tokenizer, c.family, c.model
        self.engine = SharedEngine(c.engine)
        self.graders = graders
        self.incarnation = uuid.uuid4().hex

    def ready(self) -> str:
        return self.incarnation

    def update_weights(self, version: int, weights: dict | None) -> str:
        if self.takes_adapter:
            from rlyard.models.lora import load_trainable_state_dict

            if weights is not None:
                load_trainable_state_dict(self.model, weights)
            weights = None  # the engine saves the adapter from self.model
        self.engine.update_weights(version, weights)
        return self.incarnation

    def play(self, tasks: list[Task], n: int, params: SamplingParams, group_prefix: str,
             truncated_reward: float | None, limits) -> tuple[str, list[Trajectory], bool]:
        """(incarnation, the groups' trajectories, whether a grader died under them: replay them then)."""
        from rlyard.orchestrate.rollout import rollout

        lost = threading.Event()
        family = remote_family(self.family, self.graders, lost.set) if self.graders else self.family
        pin = contextlib.nullcontext() if self.config.orchestrate.partial_rollouts else self.engine.pinned()
        try:
            with pin:
                trajectories = rollout(self.engine, self.tokenizer, family, tasks, n, params, group_prefix, truncated_reward, limits)
        except GraderLost:  # raised where rollout() does not catch it (making an environment)
            return self.incarnation, [], True
        return self.incarnation, trajectories, lost.is_set()

    def generate(self, prompts: list[list[int]], params: SamplingParams, n: int = 1):
        return self.incarnation, self.engine.generate(prompts, params, n)


class LearnerActor:
    """The learner: rank 0 runs the run's ordinary sync or async loop, with the rollout actors as
    its engine; with `orchestrate.ray.learners` > 1 the other ranks follow it (ray_learners.py)."""

    def __init__(self, config_data: dict, rollout_actors: list, graders: list, namespace: str, rank: int = 0, world: int = 1):
        self.config = RunConfig.model_validate(config_data)
        self.rollout_actors, self.graders, self.namespace = rollout_actors, graders, namespace
        self.rank, self.world, self.c = rank, world, None

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0's address and a free port for the process group."""
        import socket

        import ray

        with socket.socket() as probe:
            probe.bind(("", 0))
            return ray.util.get_node_ip_address(), probe.getsockname()[1]

    def join(self, address: str, port: int) -> None:
        """Enter the FSDP2 process group (every rank at once: it returns when all have joined)."""
        import os

        from rlyard.train import fsdp

        os.environ.update(RANK=str(self.rank), WORLD_SIZE=str(self.world), MASTER_ADDR=address, MASTER_PORT=str(port))
        fsdp.init_process_group()

    def prepare(self) -> None:
        """A follower's own sharded model and learner, built as rank 0 builds its own (same seed)."""
        from rlyard.orchestrate.setup import build

        self.c = build(self.config, engine=IdleEngine(), shard=True)

    def score(self, share):
        return self.c.learner.score(share)

    def train_step(self, share, advantages, step, scores, returns) -> None:
        self.c.learner.train_step(share, advantages, step, scores, returns)

    def rollout_weights(self, takes_adapter: bool) -> None:
        from rlyard.train import fsdp

        fsdp.rollout_weights(self.c.model, takes_adapter=takes_adapter)

    def load_checkpoint(self, path: str) -> None:
        from rlyard.train.checkpoint import load_sharded

        load_sharded(Path(path), self.c.model, self.c.learner.optimizer)

    def gather_checkpoint(self, lora: bool) -> None:
        from rlyard.orchestrate.ray_learners import gather_checkpoint

        gather_checkpoint(self.c.model, self.c.learner.optimizer, lora)

    def train(self, run_dir: str, resume: bool, followers: list = ()):
        from rlyard.orchestrate.async_loop import train_async
        from rlyard.orchestrate.ray_fleet import RayFleet
        from rlyard.orchestrate.sync_loop import train_sync

        import ray

        ray.get([follower.prepare.remote() for follower in followers])
        fleet = RayFleet(self.rollout_actors, self.config, self.graders)
        loop = train_async if self.config.orchestrate.mode == "async" else train_sync
        return loop(self.config, Path(run_dir), resume, engine=fleet, followers=list(followers))


class IdleEngine:
    """A follower rank's engine: it never samples (rank 0's fleet does)."""

    policy_version = 0

    def generate(self, prompts, params, n: int = 1):
        raise RuntimeError("a follower learner rank does not sample")

    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        self.policy_version = version
