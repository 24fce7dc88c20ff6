"""Single-turn rollouts: tasks -> prompts -> engine samples -> verdicts -> Trajectories.

A broken environment or verifier fails its own episode (flagged `infra_error`), never the run:
one whose reset, step or score raises, or whose verdict is no Reward, or not a finite number
(NaN, inf, a str, None; a component too), which would otherwise train as a reward. A step or
score that raised on the policy's reply itself (a NUL byte, text that is no UTF-8, nesting past
the parser's depth: `rlyard.environment.outcomes`) is the policy's failure: 0 with the reason.
"""
from __future__ import annotations

import math
import numbers
import time
import traceback
from dataclasses import replace

from rlyard.agent.loop import AgentLimits, run_episodes
from rlyard.engines.base import Engine
from rlyard.environment import Family
from rlyard.environment.deadline import within
from rlyard.environment.outcomes import policy_verdict
from rlyard.testing.kill import kill_point
from rlyard.types import Reward, SamplingParams, Task, Trajectory


def render_prompt(tokenizer, messages: list[dict]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return list(ids)


def rollout(
    engine: Engine, tokenizer, family: Family, tasks: list[Task], n: int, params: SamplingParams, group_prefix: str = "",
    truncated_reward: float | None = None, limits: AgentLimits | None = None,
) -> list[Trajectory]:
    """n samples of each task, scored; the n samples of a task share a `group_id`.

    Multi-turn families (tools, several replies) go through the agent loop with `limits`, or through
    the family's own `play` (code: a group whose drawn arm is a third-party harness is played by it
    behind a gateway, rlyard/harness/runner.py).

    `truncated_reward`, when set, replaces the verdict of a reply cut off by max_new_tokens:
    an answer counts only if the model finished it, so a short training budget cannot hide
    trailing text that a longer evaluation budget would show.

    An engine that plays whole groups elsewhere (`play_groups`: the Ray backend's rollout
    actors, rlyard/orchestrate/ray_fleet.py) takes the call as it is.
    """
    if hasattr(engine, "play_groups"):
        return engine.play_groups(tasks, n, params, group_prefix, truncated_reward, limits)
    if family.multi_turn:
        # the round (step, refill) lets an environment pick one harness arm for a whole group
        tasks = [replace(task, metadata={**task.metadata, "round": group_prefix}) for task in tasks]
        flat_tasks = [task for task in tasks for _ in range(n)]
        group_ids = [f"{group_prefix}{t}:{task.id}" for t, task in enumerate(tasks) for _ in range(n)]
        envs_flat = [family.make_env() for _ in flat_tasks]
        play = family.play or run_episodes
        played = play(engine, tokenizer, envs_flat, flat_tasks, group_ids, params, limits or AgentLimits())
        kill_point("rollout")
        return checked(score_groups(family, tasks, group_prefix, checked(played)))
    envs = [[family.make_env() for _ in range(n)] for _ in tasks]
    prompts, reset_errors = [], {}
    for t, (task, task_envs) in enumerate(zip(tasks, envs)):
        shown = None
        for env in task_envs:
            try:
                messages = env.reset(task)
                shown = messages if shown is None else shown
            except Exception:  # this episode only: a sandbox that did not start, a broken reset
                reset_errors[id(env)] = traceback.format_exc(limit=3)
        prompts.append(render_prompt(tokenizer, shown if shown is not None else list(task.prompt)))
    started = time.perf_counter()
    completions = engine.generate(prompts, params, n=n)
    generate_seconds = (time.perf_counter() - started) / max(1, len(tasks) * n)
    kill_point("rollout")

    samples = [(t, env, completion) for t, group in enumerate(completions) for env, completion in zip(envs[t], group)]
    texts = [tokenizer.decode(completion.token_ids, skip_special_tokens=True) for _, _, completion in samples]
    verify_started = time.perf_counter()
    if family.score_batch is not None:
        verdicts = batch_verdicts(family, [tasks[t] for t, _, _ in samples], texts, [c.token_ids for _, _, c in samples])
    else:  # env_verdict closes the environments it grades
        timeout = limits.grader_timeout_s if limits else None
        verdicts = [None if id(env) in reset_errors else env_verdict(env, text, timeout) for (_, env, _), text in zip(samples, texts)]
    for _, env, _ in samples:
        if family.score_batch is not None or id(env) in reset_errors:
            close_quietly(env)
    verdicts = [(None, reset_errors[id(env)]) if id(env) in reset_errors else v for (_, env, _), v in zip(samples, verdicts)]
    verify_seconds = (time.perf_counter() - verify_started) / max(1, len(samples))

    trajectories = []
    for (t, _, completion), text, (reward, error) in zip(samples, texts, verdicts):
        task, prompt = tasks[t], prompts[t]
        infra = error is not None or reward.infra_error
        value, components = (0.0, {}) if error is not None else (reward.value, dict(reward.components))
        if truncated_reward is not None and completion.finish_reason == "length" and not infra:
            value, components["truncated"] = truncated_reward, 1.0
        error = error or (reward.info.get("error") if reward.infra_error else None)
        trajectories.append(Trajectory(
            task_id=task.id, group_id=f"{group_prefix}{t}:{task.id}",
            token_ids=prompt + completion.token_ids,
            loss_mask=[0] * len(prompt) + [1] * len(completion.token_ids),
            behaviour_logprobs=[0.0] * len(prompt) + list(completion.logprobs),
            policy_versions=[-1] * len(prompt) + [completion.policy_version] * len(completion.token_ids),
            reward=value, components=components,
            finish_reason="infra_error" if infra else completion.finish_reason, infra_error=infra,
            completion_text=text if not error else f"{text}\n[verifier error]\n{error}",
            timings={"generate": generate_seconds, "verify": verify_seconds}, info=dict(reward.info) if reward else {},
        ))
    return checked(score_groups(family, tasks, group_prefix, checked(trajectories)))


def _not_finite(value) -> bool:
    return isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)


def reward_problem(value, components) -> str | None:
    """Why this reward cannot train (a number that is not finite, or not a number), or None."""
    if _not_finite(value):
        return f"the grader's reward is {value!r}, not a finite number"
    if not isinstance(components, dict):
        return f"the grader's components are {components!r}, not a dict of numbers"
    broken = {name: v for name, v in components.items() if _not_finite(v)}
    return f"the grader's components {broken!r} are not finite numbers" if broken else None


def verdict_problem(verdict) -> str | None:
    """Why a grader's verdict is unusable (no Reward, or a reward that cannot train), or None."""
    if not isinstance(verdict, Reward):
        return f"the grader returned {verdict!r}, not a Reward"
    problem = None if verdict.infra_error else reward_problem(verdict.value, verdict.components)
    return f"{problem}: {verdict!r}" if problem else None


def checked(trajectories: list[Trajectory]) -> list[Trajectory]:
    """Every trajectory whose reward cannot train becomes an infra episode (reward 0, out of its group)."""
    out = []
    for trajectory in trajectories:
        problem = None if trajectory.infra_error else reward_problem(trajectory.reward, trajectory.components)
        if problem is not None:
            trajectory = replace(trajectory, reward=0.0, components={}, infra_error=True, finish_reason="infra_error",
                                 completion_text=f"{trajectory.completion_text}\n[invalid reward]\n{problem}",
                                 info={**trajectory.info, "error": problem})
        out.append(trajectory)
    return out


def score_groups(family: Family, tasks: list[Task], group_prefix: str, trajectories: list[Trajectory]) -> list[Trajectory]:
    """The family's group step (`Family.score_group`) on each finished group, in place of its members.

    It sees every member, infra ones included (it must leave those as they are); a group step that
    raises, or answers with another number of trajectories, fails its whole group as infra, never 0.
    """
    if family.score_group is None:
        return trajectories
    by_group: dict[str, list[int]] = {}
    for i, trajectory in enumerate(trajectories):
        by_group.setdefault(trajectory.group_id, []).append(i)
    out = list(trajectories)
    for t, task in enumerate(tasks):
        members = by_group.get(f"{group_prefix}{t}:{task.id}", [])
        if not members:
            continue
        group = [trajectories[i] for i in members]
        started = time.perf_counter()
        try:
            scored = family.score_group(task, group)
            if len(scored) != len(group):
                raise ValueError(f"score_group returned {len(scored)} trajectories for a group of {len(group)}")
        except Exception:
            error = traceback.format_exc(limit=3)
            scored = [replace(m, reward=0.0, infra_error=True, finish_reason="infra_error",
                              completion_text=f"{m.completion_text}\n[group scoring error]\n{error}") for m in group]
        seconds = (time.perf_counter() - started) / len(group)
        for i, trajectory in zip(members, scored):
            out[i] = replace(trajectory, timings={**trajectory.timings, "score_group": seconds})
    return out


def env_verdict(env, text: str, grader_timeout_s: float | None = None) -> tuple[Reward | None, str | None]:
    """(reward, None), or (None, the traceback) when the environment or its verifier broke.

    The reply is the policy's: an environment of any kind (a third party's too) that raises on it
    in the way only data makes code raise scores 0 with the reason (rlyard/environment/outcomes.py);
    any other exception, and every platform fault, is infra."""
    try:
        env.step(text)
        verdict = within(grader_timeout_s, env.score)
        if problem := verdict_problem(verdict):
            return None, problem
        return verdict, None
    except Exception as error:  # a broken verifier fails this episode only
        if (zero := policy_verdict(error)) is not None:
            return zero, None
        return None, traceback.format_exc(limit=3)
    finally:
        close_quietly(env)


def close_quietly(env) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - a failing cleanup must not lose a finished episode
        pass


def batch_verdicts(family: Family, tasks: list[Task], texts: list[str], ids: list[list[int]]) -> list[tuple[Reward | None, str | None]]:
    """The family's batch grader over every sample; a grader that breaks as a whole fails them all."""
    try:
        rewards = family.score_batch(tasks, texts, ids)
        if len(rewards) != len(tasks):
            raise ValueError(f"score_batch returned {len(rewards)} rewards for {len(tasks)} samples")
        return [(None, problem) if (problem := verdict_problem(reward)) else (reward, None) for reward in rewards]
    except Exception:
        error = traceback.format_exc(limit=3)
        return [(None, error)] * len(tasks)
