"""Harness episodes in a rollout: a whole group played by a third-party harness, graded, trained.

`play_episodes` is what the rollout calls for a multi-turn family. An environment whose drawn arm
is a harness (it answers `harness_for(task)` with a name) is played by that harness; every other
episode goes through rlyard's own agent loop, unchanged. For the harness episodes of one call:

1. one in-process gateway over the run's engine (so the policy's current weights sample every
   reply), each episode on its own session; this thread makes every engine call (see gateway.py);
2. each environment reset as for a tool arm (workspace, sandbox, guard); the harness gets the
   session URL, the workspace, the environment's `run_command` as its exec function, the task
   text (the last message reset returns) and the run's limits and sampling settings;
3. the episodes run in threads (they wait on HTTP and sandboxes, not on the CPU);
4. each session's trajectory is fetched over HTTP and graded by the environment's own `score`,
   on the final workspace, exactly as a tool arm's episode.

A harness that raises, a gateway that does not answer, a grader that crashes: the episode is
`infra_error` (it leaves its group), never a 0. A session whose conversation did not continue
(the harness rewrote its history) has several segments; each becomes a trajectory with the
episode's reward and its `episode_id`, so that group statistics count the episode once. A
segment longer than agent.max_total_tokens is cut there ("token_budget"):
its prefix is still exactly what the policy sampled.
"""
from __future__ import annotations

import hashlib
import re
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from rlyard.agent.loop import AgentLimits, run_episodes
from rlyard.engines.base import Engine, fold_seed
from rlyard.environment import Environment
from rlyard.environment.deadline import within
from rlyard.harness.base import Harness, HarnessEpisode, get_harness
from rlyard.harness.gateway import MODEL_NAME, Gateway
from rlyard.types import SamplingParams, Task, Trajectory


def harness_arm(env: Environment, task: Task) -> str | None:
    """The harness the environment wants for this task, or None (its arm is a tool set)."""
    ask = getattr(env, "harness_for", None)
    return ask(task) if ask is not None else None


def play_episodes(
    engine: Engine, tokenizer, envs: list[Environment], tasks: list[Task], group_ids: list[str],
    params: SamplingParams, limits: AgentLimits = AgentLimits(),
) -> list[Trajectory]:
    """One episode per (env, task): tool arms through `run_episodes`, harness arms through their
    harness. Trajectories come in the order of `envs`."""
    arms = [harness_arm(env, task) for env, task in zip(envs, tasks)]
    tool = [i for i, arm in enumerate(arms) if arm is None]
    harnessed = [i for i, arm in enumerate(arms) if arm is not None]
    out: list[list[Trajectory]] = [[] for _ in envs]
    if tool:
        played = run_episodes(engine, tokenizer, [envs[i] for i in tool], [tasks[i] for i in tool],
                              [group_ids[i] for i in tool], params, limits)
        for i, trajectory in zip(tool, played):
            out[i] = [trajectory]
    if harnessed:
        played = play_harness_episodes(engine, tokenizer, [envs[i] for i in harnessed], [tasks[i] for i in harnessed],
                                       [group_ids[i] for i in harnessed], [arms[i] for i in harnessed], params, limits)
        for i, trajectories in zip(harnessed, played):
            out[i] = trajectories
    return [t for trajectories in out for t in trajectories]


def play_harness_episodes(
    engine: Engine, tokenizer, envs: list[Environment], tasks: list[Task], group_ids: list[str], arms: list[str],
    params: SamplingParams, limits: AgentLimits,
) -> list[list[Trajectory]]:
    """Each episode played by its arm's harness, concurrently, behind one gateway; per episode its trajectories."""
    harnesses = [get_harness(arm) for arm in arms]  # a missing package fails the run here, naming it
    with Gateway(engine, tokenizer, params.stop_token_ids, limits.max_total_tokens, limits.max_tokens_per_turn) as gateway:
        with ThreadPoolExecutor(max_workers=len(envs), thread_name_prefix="rlyard-harness") as pool:
            futures = [pool.submit(play_one, gateway, tokenizer, harness, env, task, gid, f"{gid}#{k}", params, limits)
                       for k, (harness, env, task, gid) in enumerate(zip(harnesses, envs, tasks, group_ids))]
            gateway.relay.serve_until(lambda: all(future.done() for future in futures))  # this thread generates
            return [future.result() for future in futures]


def session_id(key: str) -> str:
    """A session id the gateway accepts ([A-Za-z0-9_.-], at most 128), unique per episode."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', key)[:100]}-{digest}"


def episode_seed(params: SamplingParams, key: str) -> int | None:
    """Distinct per episode (the harness asks with it on every call; the gateway folds each
    session turn in): a group's samples must differ."""
    return fold_seed(params.seed, "episode", key)


def play_one(gateway: Gateway, tokenizer, harness: Harness, env: Environment, task: Task, group_id: str, key: str,
             params: SamplingParams, limits: AgentLimits) -> list[Trajectory]:
    """One harness episode, start to grade; never raises."""
    session, started = session_id(key), time.perf_counter()
    error, finish = "", "infra_error"
    try:
        messages = env.reset(task)
        episode = HarnessEpisode(
            base_url=gateway.base_url(session), model=MODEL_NAME, workspace=env.workspace, exec=env.run_command,
            task=str(messages[-1]["content"]), max_turns=limits.max_turns, max_tokens=limits.max_tokens_per_turn,
            temperature=params.temperature, top_p=params.top_p, seed=episode_seed(params, key))
        outcome = harness(episode)
        env.submitted, finish = outcome.submission, outcome.finish_reason
    except Exception:  # the harness or the sandbox broke: not the policy's fault
        error = traceback.format_exc(limit=5)
    segments: list[Trajectory] = []
    try:
        segments = gateway.trajectories(session)
    except Exception:
        error = error or traceback.format_exc(limit=3)
    finally:
        gateway.forget(session)
    if not segments and not error:
        error = "the harness ended without a model call: nothing was sampled to train on"
    reward, components, infra, details = 0.0, {}, bool(error), {}
    if not infra:
        try:
            verdict = within(limits.grader_timeout_s, env.score)
            reward, components, infra, details = verdict.value, dict(verdict.components), verdict.infra_error, dict(verdict.info)
        except Exception:
            infra, error = True, traceback.format_exc(limit=3)
    try:
        env.close()
    except Exception:
        pass  # a failing cleanup must not lose a finished episode
    seconds = time.perf_counter() - started
    segments = segments or [Trajectory(task_id=task.id, group_id=group_id, token_ids=[], loss_mask=[], behaviour_logprobs=[],
                                       policy_versions=[], turns=0)]
    return [replace(finished(segment, tokenizer, task, group_id, reward, components, finish, infra, error, seconds, limits),
                    info=details, episode_id=key) for segment in segments]


def finished(segment: Trajectory, tokenizer, task: Task, group_id: str, reward: float, components: dict[str, float],
             finish: str, infra: bool, error: str, seconds: float, limits: AgentLimits) -> Trajectory:
    """A session segment as a graded trajectory of the group, cut at the token budget."""
    cut = len(segment.token_ids) > limits.max_total_tokens
    keep = limits.max_total_tokens if cut else len(segment.token_ids)
    trajectory = replace(
        segment, task_id=task.id, group_id=group_id, token_ids=segment.token_ids[:keep], loss_mask=segment.loss_mask[:keep],
        behaviour_logprobs=segment.behaviour_logprobs[:keep], policy_versions=segment.policy_versions[:keep],
        temperatures=segment.temperatures[:keep] if segment.temperatures is not None else None,
        reward=reward, components=components, infra_error=infra,
        finish_reason="infra_error" if infra else "token_budget" if cut else finish, timings={"episode": seconds})
    text = sampled_text(tokenizer, trajectory)
    return replace(trajectory, completion_text=f"{text}\n[error]\n{error}" if error else text)


def sampled_text(tokenizer, trajectory: Trajectory) -> str:
    """The sampled replies, decoded, one per run of loss_mask 1 (for logs and the viewer)."""
    runs, current = [], []
    for token, mask in zip(trajectory.token_ids, trajectory.loss_mask):
        if mask:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return "\n---\n".join(tokenizer.decode(run, skip_special_tokens=True) for run in runs)
