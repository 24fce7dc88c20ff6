"""Single-turn rollouts: tasks -> prompts -> engine samples -> verdicts -> Trajectories.

A broken environment or verifier fails its own episode (flagged `infra_error`), never the run.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import replace

from rlyard.agent.loop import AgentLimits
from rlyard.engines.base import Engine
from rlyard.envs.base import Family
from rlyard.harness.runner import play_episodes
from rlyard.types import SamplingParams, Task, Trajectory


def render_prompt(tokenizer, messages: list[dict]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return list(ids)


def rollout(
    engine: Engine, tokenizer, family: Family, tasks: list[Task], n: int, params: SamplingParams, group_prefix: str = "",
    truncated_reward: float | None = None, limits: AgentLimits | None = None,
) -> list[Trajectory]:
    """n samples of each task, scored; the n samples of a task share a `group_id`.

    Multi-turn families (tools, several replies) go through the agent loop with `limits`; a group
    whose drawn arm is a third-party harness is played by it behind a gateway (rlyard/harness/runner.py).

    `truncated_reward`, when set, replaces the verdict of a reply cut off by max_new_tokens:
    an answer counts only if the model finished it, so a short training budget cannot hide
    trailing text that a longer evaluation budget would show.
    """
    if family.multi_turn:
        # the round (step, refill) lets an environment pick one harness arm for a whole group
        tasks = [replace(task, metadata={**task.metadata, "round": group_prefix}) for task in tasks]
        flat_tasks = [task for task in tasks for _ in range(n)]
        group_ids = [f"{group_prefix}{t}:{task.id}" for t, task in enumerate(tasks) for _ in range(n)]
        envs_flat = [family.make_env() for _ in flat_tasks]
        return play_episodes(engine, tokenizer, envs_flat, flat_tasks, group_ids, params, limits or AgentLimits())
    envs = [[family.make_env() for _ in range(n)] for _ in tasks]
    prompts = []
    for task, task_envs in zip(tasks, envs):
        messages = [env.reset(task) for env in task_envs][0]
        prompts.append(render_prompt(tokenizer, messages))
    started = time.perf_counter()
    completions = engine.generate(prompts, params, n=n)
    generate_seconds = (time.perf_counter() - started) / max(1, len(tasks) * n)

    trajectories = []
    for t, (task, prompt, group) in enumerate(zip(tasks, prompts, completions)):
        for env, completion in zip(envs[t], group):
            text = tokenizer.decode(completion.token_ids, skip_special_tokens=True)
            verify_started = time.perf_counter()
            infra, info = False, {}
            try:
                env.step(text)
                reward = env.score()
                infra = reward.infra_error
                value, components = reward.value, dict(reward.components)
                if truncated_reward is not None and completion.finish_reason == "length" and not infra:
                    value, components["truncated"] = truncated_reward, 1.0
            except Exception:  # a broken verifier fails this episode only
                infra, value, components = True, 0.0, {}
                info = {"error": traceback.format_exc(limit=3)}
            finally:
                env.close()
            trajectories.append(Trajectory(
                task_id=task.id, group_id=f"{group_prefix}{t}:{task.id}",
                token_ids=prompt + completion.token_ids,
                loss_mask=[0] * len(prompt) + [1] * len(completion.token_ids),
                behaviour_logprobs=[0.0] * len(prompt) + list(completion.logprobs),
                policy_versions=[-1] * len(prompt) + [completion.policy_version] * len(completion.token_ids),
                reward=value, components=components,
                finish_reason="infra_error" if infra else completion.finish_reason, infra_error=infra,
                completion_text=text if not info else f"{text}\n[verifier error]\n{info['error']}",
                timings={"generate": generate_seconds, "verify": time.perf_counter() - verify_started},
            ))
    return trajectories
