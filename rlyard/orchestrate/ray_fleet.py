"""The learner's view of the Ray rollout actors: one engine, so the sync and async loops, the
evaluation and `push_weights` run unchanged.

`rollout()` hands a fleet whole groups (`play_groups`) instead of asking it for tokens: each
actor plays its groups through its own engine and agent loop, so only tasks go out and
trajectories come back. New weights go out once per step through the object store (one
`ray.put`, every actor reads the same object).

A rollout actor that dies is restarted by Ray (`orchestrate.ray.max_actor_restarts`). Whoever
next talks to it (a play, an update) sees either the death (a Ray actor error) or a new
incarnation id in the reply; the fleet then waits until the actor is back, sends it the current
weights, and plays the group again with the same seeds, so that no group is lost and none is
sampled by the weights a fresh actor starts with. A group under which a grader actor died is
played again the same way, once the graders answer.
"""
from __future__ import annotations

import contextlib
import threading
import time

from rlyard.config import RunConfig
from rlyard.types import SamplingParams, Task, Trajectory

READY_TIMEOUT_S = 300.0  # how long a restarting actor may take to build its engine again


def share_bounds(size: int, shares: int) -> list[int]:
    """Contiguous shares of `size` items over `shares` takers (sizes differ by one at most)."""
    return [round(k * size / shares) for k in range(shares + 1)]


def takes_adapter(config: RunConfig) -> bool:
    """Rollout actors that get the LoRA adapter's weights each step (a few MB) instead of the merged model."""
    return config.rollout.engine == "vllm" and config.model.lora.enabled


class ActorLost(RuntimeError):
    """An actor did not come back within READY_TIMEOUT_S, or died too often."""


class RayFleet:
    def __init__(self, actors: list, config: RunConfig, graders: list = ()):
        import ray

        self.ray, self.actors, self.graders, self.config = ray, list(actors), list(graders), config
        self.takes_adapter = takes_adapter(config)  # push_weights then sends the adapter's weights only
        self.policy_version = 0
        self._weights = None  # the object ref of the last weights sent (None: the starting policy)
        self._incarnations = ray.get([actor.ready.remote() for actor in self.actors])
        self._locks = [threading.Lock() for _ in self.actors]
        self._busy = [0] * len(self.actors)
        self._pick_lock = threading.Lock()
        self._grader_incarnations = ray.get([grader.ready.remote() for grader in self.graders])
        self.restarts = self.replays = self.grader_restarts = 0

    # ---------------------------------------------------------------- the engine contract
    def update_weights(self, version: int, state_dict: dict | None = None) -> None:
        ray = self.ray
        weights = None if state_dict is None else ray.put({k: v.detach().cpu() for k, v in state_dict.items()})
        self.policy_version, self._weights = version, weights
        pending = {i: actor.update_weights.remote(version, weights) for i, actor in enumerate(self.actors)}
        for i, ref in pending.items():
            try:
                incarnation = ray.get(ref)
            except ray.exceptions.RayActorError:
                self._recover(i)
                continue
            if incarnation != self._incarnations[i]:
                self._recover(i)

    def generate(self, prompts: list[list[int]], params: SamplingParams, n: int = 1):
        return self._on_actor(lambda actor: actor.generate.remote(prompts, params, n))

    def play_groups(self, tasks: list[Task], n: int, params: SamplingParams, group_prefix: str,
                    truncated_reward: float | None, limits) -> list[Trajectory]:
        """`rollout()` for a fleet: the tasks split into one contiguous share per actor (all of
        them at once; an async worker's single task goes to the least busy actor). Group ids keep
        their index in the whole call, as a local rollout numbers them."""
        if not tasks:
            return []
        shares = min(len(tasks), len(self.actors))
        bounds = share_bounds(len(tasks), shares)
        out: list[list[Trajectory]] = [[] for _ in range(shares)]

        def play(k: int) -> None:
            share = tasks[bounds[k]:bounds[k + 1]]
            played = self._on_actor(lambda actor: actor.play.remote(share, n, params, group_prefix, truncated_reward, limits),
                                    replay_if_lost=True)
            out[k] = [renumber(t, group_prefix, bounds[k]) for t in played]

        threads = [threading.Thread(target=play, args=(k,), daemon=True) for k in range(1, shares)]
        for thread in threads:
            thread.start()
        play(0)
        for thread in threads:
            thread.join()
        return [t for share in out for t in share]

    def pinned(self):
        """orchestrate.partial_rollouts=false: each rollout actor pins a group's weights itself."""
        return contextlib.nullcontext()

    def metrics(self) -> dict[str, float]:
        """Restarts so far: rollout actors (seen by the calls), grader actors (asked each step)."""
        for k, grader in enumerate(self.graders):
            incarnation = self._wait_ready(grader, f"grader actor {k}")
            if incarnation != self._grader_incarnations[k]:
                self._grader_incarnations[k] = incarnation
                self.grader_restarts += 1
        return {"rollout/actor_restarts": float(self.restarts), "rollout/grader_restarts": float(self.grader_restarts),
                "rollout/replayed_calls": float(self.replays)}

    # ---------------------------------------------------------------- restarts
    def _on_actor(self, submit, replay_if_lost: bool = False):
        """Run one call on the least busy actor; on a restart, recover it and call again."""
        with self._pick_lock:
            i = min(range(len(self.actors)), key=lambda k: self._busy[k])
            self._busy[i] += 1
        try:
            for _ in range(self.config.orchestrate.ray.max_actor_restarts + 2):
                try:
                    reply = self.ray.get(submit(self.actors[i]))
                except self.ray.exceptions.RayActorError:
                    self._recover(i)
                    self.replays += 1
                    continue
                incarnation, result, *lost = reply
                if incarnation != self._incarnations[i]:  # restarted between calls: sampled by fresh weights
                    self._recover(i)
                    self.replays += 1
                    continue
                if replay_if_lost and lost and lost[0]:
                    self._wait_graders()
                    self.replays += 1
                    continue
                return result
            raise ActorLost(f"rollout actor {i} kept failing the same call "
                            f"(orchestrate.ray.max_actor_restarts={self.config.orchestrate.ray.max_actor_restarts})")
        finally:
            with self._pick_lock:
                self._busy[i] -= 1

    def _recover(self, i: int) -> None:
        """Wait until actor i answers again; if it is a new incarnation, give it the current weights."""
        with self._locks[i]:
            incarnation = self._wait_ready(self.actors[i], f"rollout actor {i}")
            if incarnation == self._incarnations[i]:
                return  # another thread already recovered it
            self.restarts += 1
            if self.restarts > self.config.orchestrate.ray.max_actor_restarts * len(self.actors):
                raise ActorLost(f"rollout actors restarted {self.restarts} times; giving up")
            print(f"[rlyard] rollout actor {i} was restarted; sending it policy version {self.policy_version} "
                  "and playing its groups again", flush=True)
            incarnation = self.ray.get(self.actors[i].update_weights.remote(self.policy_version, self._weights))
            self._incarnations[i] = incarnation

    def _wait_graders(self) -> None:
        for k, grader in enumerate(self.graders):
            self._wait_ready(grader, f"grader actor {k}")

    def _wait_ready(self, actor, what: str) -> str:
        """The actor's incarnation once it answers. A restarting actor refuses calls for a while
        (ActorUnavailableError) or queues them; one that is dead for good says so (ActorDiedError)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        died = 0
        while True:
            try:
                return self.ray.get(actor.ready.remote(), timeout=30)
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError) as error:
                died = died + 1 if isinstance(error, self.ray.exceptions.ActorDiedError) else 0
                if died >= 20 or time.monotonic() > deadline:
                    raise ActorLost(f"{what} did not come back: {error}") from None
                time.sleep(0.5)


def renumber(trajectory: Trajectory, prefix: str, offset: int) -> Trajectory:
    """A share's group id `prefix + local index + ":" + task id`, with the index in the whole call."""
    if not offset:
        return trajectory
    local, _, task_id = trajectory.group_id[len(prefix):].partition(":")
    trajectory.group_id = f"{prefix}{int(local) + offset}:{task_id}"
    return trajectory
