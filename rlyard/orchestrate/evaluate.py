"""Held-out evaluation: greedy pass@1 and sampled pass@k on an environment's eval split."""
from __future__ import annotations

import math
from typing import Callable

from rlyard.agent.loop import AgentLimits
from rlyard.engines.base import Engine
from rlyard.environment import Family
from rlyard.orchestrate.rollout import rollout
from rlyard.types import SamplingParams, Task, Trajectory


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - correct < k:
        return 1.0
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)


def one_per_episode(trajectories: list[Trajectory]) -> list[Trajectory]:
    """The first segment of each episode: a harness episode whose history was rewritten comes back
    as several trajectories with one reward, and counts once."""
    seen: set[str] = set()
    out = []
    for trajectory in trajectories:
        if trajectory.episode_id and trajectory.episode_id in seen:
            continue
        seen.add(trajectory.episode_id)
        out.append(trajectory)
    return out


def evaluate(
    engine: Engine, tokenizer, family: Family, tasks: list[Task], max_new_tokens: int, stop_token_ids: tuple[int, ...],
    batch_size: int = 64, samples: int = 0, k: int = 1, temperature: float = 1.0, seed: int = 0, progress=None,
    limits: AgentLimits | None = None, on_greedy: Callable[[list[Trajectory]], None] | None = None,
    on_sampled: Callable[[list[Trajectory]], None] | None = None, greedy: bool = True,
) -> dict[str, float | int]:
    """Greedy accuracy (pass@1), and with `samples` > 0 sampled pass@k at `temperature`.

    `greedy=False` (needs `samples`) skips the greedy episodes: for a family whose greedy replies
    loop they cost half the time and say nothing, and the result then has only the sampled keys
    (plus `tasks`, `infra_errors`, `mean_tokens`, `mean_turns` over the sampled episodes).

    `progress(done, total)` is called after each batch of episodes, counted as greedy episodes
    (one per task) plus sampled ones (`samples` per task). A sampled batch holds about
    `batch_size` episodes (at least one task), so the count moves often even with many samples.
    Counts (`tasks`, `infra_errors`) are ints, rates floats. Accuracy counts rewards >= 1 (a solved
    task); `mean_reward` averages the graded greedy episodes' rewards, the figure to watch when the
    reward is a weighted sum of `env.reward` functions rather than 0 / 1. Besides accuracy: mean sampled tokens,
    mean turns and the mean of each reward component over the greedy episodes (for tool families
    e.g. `mean_malformed_calls`, `mean_tool_calls`: how an agent behaves, not only whether it won).
    `on_greedy` gets each batch of greedy episodes (`rlyard eval --trajectories` keeps them to read),
    `on_sampled` each batch of sampled ones. With samples, `sampled_mean_reward` and
    `sampled_mean_<component>` are the same means over the sampled episodes: where greedy decoding
    of a small model loops (a tune repeating one bar), they are what the policy does at the
    temperature it trains at.
    """
    if not greedy and samples < 1:
        raise ValueError("an evaluation without greedy episodes needs samples >= 1")
    greedy_params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids)
    correct, infra, lengths, turns, components, rewards = 0, 0, [], [], {}, []
    per_task_hits: list[tuple[int, int]] = []  # per task: (episodes, solved ones)
    sampled_rewards: list[float] = []
    sampled_components: dict[str, list[float]] = {}
    total, done = len(tasks) * (int(greedy) + samples), 0
    tasks_per_sampled_batch = max(1, batch_size // max(1, samples))
    for start in range(0, len(tasks), batch_size):
        chunk = tasks[start : start + batch_size]
        episodes = one_per_episode(rollout(engine, tokenizer, family, chunk, 1, greedy_params, limits=limits)) if greedy else []
        if on_greedy is not None and episodes:
            on_greedy(episodes)
        for traj in episodes:
            correct += traj.reward >= 1.0
            infra += traj.infra_error
            rewards += [] if traj.infra_error else [traj.reward]
            lengths.append(traj.num_sampled_tokens)
            turns.append(traj.turns)
            for name, value in traj.components.items():
                components.setdefault(name, []).append(float(value))
        done += len(episodes)
        if progress is not None and episodes:
            progress(done, total)
        for sub in range(0, len(chunk) if samples else 0, tasks_per_sampled_batch):
            part = chunk[sub : sub + tasks_per_sampled_batch]
            sampled = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids,
                                     seed=seed + start + sub)
            by_task: dict[str, list[Trajectory]] = {}
            episodes = one_per_episode(rollout(engine, tokenizer, family, part, samples, sampled, limits=limits))
            if on_sampled is not None:
                on_sampled(episodes)
            for tr in episodes:
                by_task.setdefault(tr.group_id, []).append(tr)
                if not greedy:
                    infra += tr.infra_error
                    lengths.append(tr.num_sampled_tokens)
                    turns.append(tr.turns)
                if not tr.infra_error:
                    sampled_rewards.append(tr.reward)
                    for name, value in tr.components.items():
                        sampled_components.setdefault(name, []).append(float(value))
            # one group per task, of `samples` episodes (whatever number of segments each came back as)
            per_task_hits += [(len(group), sum(tr.reward >= 1.0 for tr in group)) for group in by_task.values()]
            done += len(part) * samples
            if progress is not None:
                progress(done, total)
    result: dict[str, float | int] = {
        "tasks": len(tasks), "infra_errors": int(infra), "mean_tokens": sum(lengths) / max(1, len(lengths)),
        "mean_turns": sum(turns) / max(1, len(turns)),
    }
    if greedy:
        result.update({"accuracy": correct / max(1, len(tasks)), "mean_reward": sum(rewards) / max(1, len(rewards)),
                       **{f"mean_{name}": sum(values) / len(values) for name, values in sorted(components.items())}})
    if samples:
        result[f"pass@{k}"] = sum(pass_at_k(n, hits, k) for n, hits in per_task_hits) / len(per_task_hits)
        result["sampled_accuracy"] = sum(hits for _, hits in per_task_hits) / sum(n for n, _ in per_task_hits)
        result["sampled_mean_reward"] = sum(sampled_rewards) / max(1, len(sampled_rewards))
        result.update({f"sampled_mean_{name}": sum(v) / len(v) for name, v in sorted(sampled_components.items())})
    return result
