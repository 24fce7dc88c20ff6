"""A harness episode whose history was rewritten comes back as several segments: its group's
statistics, the loss weights and evaluation count it once (issue 37, item 3).

Played for real: an in-process harness on the official openai client, behind the gateway, over
the real hf engine. Of each pair of episodes the first rewrites its history after its first reply
(two segments) and solves the task, the second does not (one segment).
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")

from rlyard.agent.loop import AgentLimits  # noqa: E402
from rlyard.algos.aggregate import token_weights  # noqa: E402
from rlyard.config import load_config  # noqa: E402
from rlyard.engines import HFEngine  # noqa: E402
from rlyard.environment import Family  # noqa: E402
from rlyard.harness.base import HarnessEpisode, HarnessOutcome, register_harness  # noqa: E402
from rlyard.harness.runner import play_episodes  # noqa: E402
from rlyard.orchestrate.evaluate import evaluate  # noqa: E402
from rlyard.orchestrate.targets import compute_advantages  # noqa: E402
from rlyard.types import Reward, SamplingParams, Task  # noqa: E402

ARM = "segments-test"
ORDER = itertools.count()


class RewritingHarness:
    """Asks twice; the rewriting one drops its own first reply from the history (a new segment)."""

    def __init__(self, rewrites: bool):
        self.rewrites = rewrites

    def __call__(self, episode: HarnessEpisode) -> HarnessOutcome:
        api = openai.OpenAI(base_url=episode.base_url, api_key="unused", max_retries=0, timeout=60)
        messages = [{"role": "user", "content": episode.task}]
        first = api.chat.completions.create(model=episode.model, messages=messages, max_tokens=3, temperature=1.0, seed=episode.seed)
        if self.rewrites:
            messages = [*messages, {"role": "user", "content": "Start over."}]
        else:
            messages = [*messages, {"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "More."}]
        api.chat.completions.create(model=episode.model, messages=messages, max_tokens=3, temperature=1.0, seed=episode.seed)
        return HarnessOutcome("submitted", "solved" if self.rewrites else "not solved")


register_harness(ARM, lambda: RewritingHarness(next(ORDER) % 2 == 0))


class HarnessEnv:
    """A multi-turn environment whose every task is played by the harness above."""

    def __init__(self):
        self.workspace, self.submitted = Path("."), None

    def harness_for(self, task):
        return ARM

    def reset(self, task):
        return list(task.prompt)

    def run_command(self, command, timeout_s=None):
        raise AssertionError("the harness runs no command")

    def score(self):
        return Reward(value=1.0 if self.submitted == "solved" else 0.0)

    def close(self):
        pass


def make_tasks(split, n, seed, **options):
    return [Task(id=f"{split}-{k}", prompt=[{"role": "user", "content": f"Task {k}."}], env="segments") for k in range(n)]


FAMILY = Family(name="segments", make_tasks=make_tasks, make_env=HarnessEnv, verify=None, multi_turn=True,
                play=play_episodes)  # its arm is a harness: played by the harness runner, as code's are


@pytest.fixture(scope="module")
def engine(tokenizer):
    from conftest import make_tiny_llama

    return HFEngine(make_tiny_llama(len(tokenizer)), tokenizer.pad_token_id)


@pytest.fixture(scope="module")
def group(engine, tokenizer):
    global ORDER
    ORDER = itertools.count()
    params = SamplingParams(temperature=1.0, max_new_tokens=3, stop_token_ids=(2,), seed=3)
    task = make_tasks("train", 1, 0)[0]
    return play_episodes(engine, tokenizer, [HarnessEnv(), HarnessEnv()], [task, task], ["g0", "g0"], params,
                         AgentLimits(max_turns=2, max_tokens_per_turn=3, max_total_tokens=512))


def test_the_segments_of_one_episode_share_its_id_and_reward(group):
    assert [t.reward for t in group] == [1.0, 1.0, 0.0]  # the rewriting episode: two segments
    assert group[0].episode_id == group[1].episode_id != group[2].episode_id != ""


@pytest.mark.parametrize("advantage", ["grpo", "dr_grpo", "rloo"])
def test_group_statistics_count_episodes(group, advantage):
    """Two episodes, rewards 1 and 0: GRPO's mean is 0.5 and its std over two episodes, whatever
    the number of segments (over three rows the mean was 2/3)."""
    config = load_config(None, [f"algo.name={advantage}", f"algo.advantage={advantage}"])
    advantages = compute_advantages(config, group).advantages
    expected = {"grpo": 0.5 / 0.5**0.5, "dr_grpo": 0.5, "rloo": 1.0}[advantage]
    assert advantages == pytest.approx([expected, expected, -expected], abs=1e-5)


def test_an_episodes_segments_share_its_loss_weight(group):
    lengths = [t.num_sampled_tokens for t in group]
    ids = [t.episode_id for t in group]
    per_sequence = token_weights(lengths, ["g0"] * 3, "seq-mean-token-sum", episode_ids=ids)
    assert per_sequence == pytest.approx([0.5, 0.5, 0.5])  # each token of an episode: 1 / episodes
    per_token_mean = token_weights(lengths, ["g0"] * 3, "seq-mean-token-mean", episode_ids=ids)
    episode_a = (lengths[0] + lengths[1]) * per_token_mean[0]
    assert episode_a == pytest.approx(0.5) and lengths[2] * per_token_mean[2] == pytest.approx(0.5)


def test_evaluation_counts_episodes_per_task(engine, tokenizer):
    global ORDER
    ORDER = itertools.count()
    tasks = make_tasks("eval", 1, 0)
    limits = AgentLimits(max_turns=2, max_tokens_per_turn=3, max_total_tokens=512)
    result = evaluate(engine, tokenizer, FAMILY, tasks, 3, (2,), samples=2, k=1, limits=limits)
    # greedy: one episode (it rewrote: two segments), solved once; sampled: 2 episodes, one solved
    assert result["accuracy"] == 1.0 and result["sampled_accuracy"] == 0.5 and result["pass@1"] == 0.5
