"""One step's rollouts: plain, with DAPO's dynamic sampling, or with ReMax's greedy baseline.

Every draw is seeded by (seed, step, round) alone, so a resumed run samples what the original would.
"""
from __future__ import annotations

import statistics

from rlyard.agent.loop import AgentLimits
from rlyard.algos.filters import dynamic_sampling_keep
from rlyard.config import RunConfig
from rlyard.orchestrate.rollout import rollout
from rlyard.orchestrate.setup import Components
from rlyard.orchestrate.targets import training_rewards
from rlyard.types import SamplingParams, Task, Trajectory


def agent_limits(config: RunConfig) -> AgentLimits:
    a = config.agent
    return AgentLimits(a.max_turns, a.max_tokens_per_turn, a.max_total_tokens, a.max_prompt_tokens, a.tool_output_chars, a.tool_format,
                       config.env.grader_timeout_s)


def sampling_for_step(config: RunConfig, step: int, stop_ids: tuple[int, ...], round_: int = 0) -> SamplingParams:
    """Seeded by (seed, step, round) alone, so a resumed run samples exactly what the original would.

    Round 0 is the step's first rollout; later rounds are dynamic-sampling refills.
    """
    r = config.rollout
    seed = config.train.seed * 1_000_003 + step + round_ * 1_000_000_007
    return SamplingParams(r.temperature, r.top_p, r.top_k, r.max_new_tokens, stop_ids, seed=seed)


def sample_batch(c: Components, config: RunConfig, step: int) -> tuple[list[Trajectory], dict[str, float] | None, dict[str, float]]:
    """One step's rollouts: prompts_per_step groups of n samples; with ReMax the greedy reward of
    each group's prompt (group id -> reward); sampling metrics.

    DAPO dynamic sampling (algo.dynamic_sampling) drops the groups whose accuracies (verifier
    rewards, before the overlong penalty) are all equal (no correctness signal) and samples
    fresh prompts for the missing groups, at most algo.max_sampling_tries rounds in all. At the cap the batch keeps the groups it
    has; if it has none, the last round trains as it is.
    """
    algo, want = config.algo, config.rollout.prompts_per_step
    kept: list[Trajectory] = []
    greedy: dict[str, float] = {}
    rounds = dropped = 0
    while True:
        tasks = c.stream.next(want - len({t.group_id for t in kept}))
        prefix = f"{step}/" if rounds == 0 else f"{step}.{rounds}/"
        params = sampling_for_step(config, step, c.stop_token_ids, rounds)
        batch = rollout(c.engine, c.tokenizer, c.family, tasks, config.rollout.n, params, prefix, config.rollout.truncated_reward,
                        agent_limits(config))
        if algo.advantage == "remax":
            greedy |= greedy_rewards(c, config, tasks, prefix)
        rounds += 1
        if not algo.dynamic_sampling:
            return batch, greedy or None, greedy_metrics(greedy)
        keep = informative_groups(config, batch)
        kept += [t for t, k in zip(batch, keep) if k]
        dropped += len({t.group_id for t, k in zip(batch, keep) if not k})
        if len({t.group_id for t in kept}) >= want or rounds >= algo.max_sampling_tries:
            break
    metrics = {"rollout/sampling_rounds": float(rounds), "rollout/dropped_groups": float(dropped)}
    return kept or batch, greedy or None, metrics | greedy_metrics(greedy)


def informative_groups(config: RunConfig, batch: list[Trajectory]) -> list[bool]:
    """Per trajectory: does its group's accuracy vary? The accuracy is the verifier's reward,
    before the soft overlong penalty (DAPO §3.2; verl-recipe's filter_groups.metric=acc): length
    penalties alone are no reason to keep a group that is all right or all wrong, nor to drop one
    whose answers differ. Decided on the valid members only (infra failures leave their group
    first); a group with no valid member is dropped."""
    valid = [i for i, t in enumerate(batch) if not t.infra_error]
    keep_valid = dynamic_sampling_keep([batch[i].reward for i in valid], [batch[i].group_id for i in valid])
    informative = {batch[i].group_id for i, keep in zip(valid, keep_valid) if keep}
    return [t.group_id in informative for t in batch]


def greedy_rewards(c: Components, config: RunConfig, tasks: list[Task], prefix: str) -> dict[str, float]:
    """ReMax's baseline: the training reward of one greedy decode of each prompt, keyed by the
    group id its samples carry (same prefix, same position). A greedy decode whose grader
    crashed counts 0."""
    r = config.rollout
    params = SamplingParams(temperature=0.0, max_new_tokens=r.max_new_tokens, stop_token_ids=c.stop_token_ids)
    decoded = rollout(c.engine, c.tokenizer, c.family, tasks, 1, params, prefix, r.truncated_reward, agent_limits(config))
    return {t.group_id: 0.0 if t.infra_error else reward for t, reward in zip(decoded, training_rewards(config, decoded))}


def greedy_metrics(greedy: dict[str, float]) -> dict[str, float]:
    return {"reward/greedy_baseline": statistics.fmean(greedy.values())} if greedy else {}
