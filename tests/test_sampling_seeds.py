"""Seeds per turn and per episode, and the token budget of a first prompt (issue 37, items 1-2).

Every turn of an episode used one `params.seed`, and the hf engine seeds a fresh generator per
call, so each turn replayed the first turn's uniforms. The seeds now come from one function,
`engines.base.fold_seed`, in every sampler; a fixed seed still replays a whole episode.
"""
import pytest
import torch

from rlyard.agent.loop import AgentLimits, run_episodes
from rlyard.engines import HFEngine
from rlyard.engines.base import fold_seed
from rlyard.environment import StepResult
from rlyard.types import Reward, SamplingParams, Task

STOP = (2,)  # <|im_end|>


class SeedRecordingEngine(HFEngine):
    """The real hf engine; it notes the seed of each call and the first uniforms it stands for."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seeds: list[int | None] = []

    def generate(self, prompts, params, n=1, on_step=None):
        self.seeds.append(params.seed)
        return super().generate(prompts, params, n, on_step=on_step)


class CountingEnv:
    """Answers every reply; done after `turns` replies. Grades nothing costly."""

    def __init__(self, turns=3):
        self.turns, self.seen, self.scored = turns, [], 0

    def reset(self, task):
        return list(task.prompt)

    def step(self, reply):
        self.seen.append(reply)
        if len(self.seen) >= self.turns:
            return StepResult(done=True, reason="submitted")
        return StepResult(messages=[{"role": "tool", "content": f"ok {len(self.seen)}"}], done=False)

    def score(self):
        self.scored += 1
        return Reward(value=1.0)

    def close(self):
        pass


def task(text="Say something."):
    return Task(id="t", prompt=[{"role": "user", "content": text}], env="count")


def uniforms(seed: int) -> torch.Tensor:
    """The first draws of the hf engine's generator for a call with this seed."""
    return torch.rand(8, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model(tokenizer):
    from conftest import make_tiny_llama

    return make_tiny_llama(len(tokenizer))


def play(model, tokenizer, seed, turns=3, episodes=2):
    """`episodes` episodes of `turns` replies; every even token id ends a reply (a random model
    seldom samples <|im_end|>, and a reply cut at the per-turn cap would end the episode)."""
    engine = SeedRecordingEngine(model, tokenizer.pad_token_id)
    stops = tuple(range(0, len(tokenizer), 2))
    params = SamplingParams(temperature=1.0, max_new_tokens=40, stop_token_ids=stops, seed=seed)
    limits = AgentLimits(max_turns=turns, max_tokens_per_turn=40, max_total_tokens=10_000)
    envs = [CountingEnv(turns) for _ in range(episodes)]
    out = run_episodes(engine, tokenizer, envs, [task()] * episodes, [f"g{k}" for k in range(episodes)], params, limits)
    return engine, out


def test_each_turn_draws_its_own_uniforms_and_a_seed_replays_the_episode(model, tokenizer):
    engine, first = play(model, tokenizer, seed=1234)
    assert len(engine.seeds) == 3 and None not in engine.seeds
    assert len(set(engine.seeds)) == 3, f"turns share a seed: {engine.seeds}"
    draws = [uniforms(seed) for seed in engine.seeds]
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])
    # the same seed: the same episodes, token for token and logprob for logprob
    again_engine, again = play(model, tokenizer, seed=1234)
    assert again_engine.seeds == engine.seeds
    assert [t.token_ids for t in again] == [t.token_ids for t in first]
    assert [t.behaviour_logprobs for t in again] == [t.behaviour_logprobs for t in first]
    # another seed: other draws (turn 0 too)
    other_engine, _ = play(model, tokenizer, seed=4321)
    assert not set(other_engine.seeds) & set(engine.seeds)


def test_fold_seed_is_deterministic_distinct_and_small():
    assert fold_seed(None, "turn", 1) is None
    assert fold_seed(7) == 7
    assert fold_seed(7, "turn", 1) == fold_seed(7, "turn", 1)
    parts = [fold_seed(7, kind, i) for kind in ("turn", "prompt", "episode", "session-turn") for i in range(50)]
    assert len(set(parts)) == len(parts)
    assert all(0 <= p < 2**31 for p in parts)
    # seed + index collided: prompt 1 of seed 7 and prompt 0 of seed 8 drew the same numbers
    assert fold_seed(7, "prompt", 1) != fold_seed(8, "prompt", 0)
    # vLLM seeds the n samples of one request seed + j: neighbouring prompts' ranges must not meet
    starts = sorted(fold_seed(7, "prompt", i) for i in range(64))
    assert min(b - a for a, b in zip(starts, starts[1:])) > 16


def test_a_first_prompt_over_the_budget_ends_before_sampling(model, tokenizer):
    """A prompt longer than agent.max_total_tokens gave room < 0, and tokens[:room] kept all but
    |room| tokens: over budget, trained. Now it ends before sampling, flagged, out of its group."""
    engine = SeedRecordingEngine(model, tokenizer.pad_token_id)
    params = SamplingParams(temperature=1.0, max_new_tokens=5, stop_token_ids=STOP, seed=0)
    # the system message alone is over the budget: agent.max_prompt_tokens cuts only the last user message
    long_task = Task(id="long", env="count", prompt=[{"role": "system", "content": "word " * 200},
                                                      {"role": "user", "content": "Say something."}])
    limits = AgentLimits(max_turns=2, max_tokens_per_turn=8, max_total_tokens=64)
    env = CountingEnv()
    (traj,) = run_episodes(engine, tokenizer, [env], [long_task], ["g"], params, limits)
    assert traj.finish_reason == "prompt_too_long" and traj.infra_error
    assert traj.num_sampled_tokens == 0 and engine.seeds == [] and env.scored == 0
    assert "agent.max_total_tokens" in traj.completion_text


def test_the_default_prompt_limit_follows_from_the_total(model, tokenizer):
    """agent.max_prompt_tokens unset: a long user message is cut to leave one reply of room."""
    assert AgentLimits(max_tokens_per_turn=64, max_total_tokens=1024).prompt_limit == 960
    assert AgentLimits(max_tokens_per_turn=600, max_total_tokens=1024).prompt_limit == 512
    assert AgentLimits(max_prompt_tokens=100, max_total_tokens=1024).prompt_limit == 100
    engine = SeedRecordingEngine(model, tokenizer.pad_token_id)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, stop_token_ids=STOP, seed=0)
    limits = AgentLimits(max_turns=1, max_tokens_per_turn=8, max_total_tokens=96)
    (traj,) = run_episodes(engine, tokenizer, [CountingEnv(1)], [task("word " * 400)], ["g"], params, limits)
    assert not traj.infra_error and traj.finish_reason != "prompt_too_long"
    assert traj.prompt_length <= limits.prompt_limit and len(traj.token_ids) <= limits.max_total_tokens
    assert traj.num_sampled_tokens > 0
