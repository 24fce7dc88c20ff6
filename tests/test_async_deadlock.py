"""Async mode never hangs silently.

`algo=dapo orchestrate.staleness_policy=wait orchestrate.max_staleness=1` used to hang: groups
that dynamic sampling rejected kept their slot under the wait policy's outstanding limit, so
once (max_staleness + 1) x prompts_per_step groups were held, no worker got a new task and the
learner waited forever for one. Rejected groups now release their slot at once; and a learner
that waits longer than a bound says what it is waiting for.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from conftest import toy_tasks, toy_verify

from rlyard.config import load_config
from rlyard.envs import Family, SingleTurnEnv, register
from rlyard.orchestrate import workers
from rlyard.orchestrate.buffer import TaskSource, Ticket
from rlyard.orchestrate.entry import train
from rlyard.orchestrate.workers import SharedEngine
from rlyard.types import Reward

pytestmark = pytest.mark.timeout(120)


def flat_verify(reply, task):
    """Every reply scores 0: every group's rewards are equal, so dynamic sampling rejects them all."""
    return Reward(value=0.0)


_first_grade = threading.Event()


def slow_first_verify(reply, task):
    """The first grade of the process takes 1 s (a slow grader): the learner waits for its first group."""
    if not _first_grade.is_set():
        _first_grade.set()
        time.sleep(1.0)
    return toy_verify(reply, task)


register(Family(name="toy_flat", make_tasks=toy_tasks, make_env=lambda: SingleTurnEnv(flat_verify), verify=flat_verify))
register(Family(name="toy_slow_first", make_tasks=toy_tasks, make_env=lambda: SingleTurnEnv(slow_first_verify),
                verify=slow_first_verify))


def dapo_wait_config(model_dir: Path, run_dir: Path, *overrides: str):
    """The configuration of the issue: DAPO (dynamic sampling, 4 tries), async, wait, max_staleness 1."""
    return load_config(None, [
        "algo=dapo", f"model.name={model_dir}", "env.train_size=8", "rollout.prompts_per_step=2", "rollout.n=4",
        "rollout.max_new_tokens=6", "eval.size=0", "output.progress=false", "output.plot=false", f"output.run_dir={run_dir}",
        "model.lora.enabled=false", "algo.lr=1e-2", "orchestrate.mode=async", "orchestrate.staleness_policy=wait",
        "orchestrate.max_staleness=1", *overrides,
    ])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("env, workers_", [("toy_flat", 2), ("toy_flat", 4), ("toy", 3)])
def test_dapo_with_the_wait_policy_finishes(tmp_path, tiny_model_dir, env, workers_):
    """toy_flat: every group is rejected, so each step tries max_sampling_tries x prompts_per_step = 8
    groups, twice the wait limit of (1 + 1) x 2 = 4 outstanding; before the fix the first step never
    ended. toy: a mix of rejected and kept groups."""
    config = dapo_wait_config(tiny_model_dir, tmp_path, f"env.name={env}", "train.steps=3", f"orchestrate.workers={workers_}")
    assert config.algo.dynamic_sampling and config.algo.max_sampling_tries == 4
    result = train(config, tmp_path)
    assert result.steps == 3
    metrics = [m for m in read_jsonl(tmp_path / "metrics.jsonl") if "reward/mean" in m]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all(m["rollout/staleness_max"] <= 1 for m in metrics)
    if env == "toy_flat":  # every try was rejected: the step trains the last groups (zero advantage), as in sync mode
        assert all(m["rollout/dropped_groups"] == 6.0 for m in metrics), metrics
    rows = read_jsonl(tmp_path / "trajectories.jsonl")
    assert len(rows) == 3 * 2 * 4
    assert all(r["trained_at_version"] - min(r["policy_versions"]) <= 1 for r in rows)
    assert not [t for t in threading.enumerate() if t.name.startswith("rlyard-rollout")]


def test_a_learner_that_waits_too_long_says_what_it_waits_for(tmp_path, tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setattr(workers, "LEARNER_WAIT_WARNING_S", 0.2)
    _first_grade.clear()
    config = dapo_wait_config(tiny_model_dir, tmp_path, "env.name=toy_slow_first", "train.steps=1", "orchestrate.workers=1")
    train(config, tmp_path)
    out = capsys.readouterr().out
    warning = next(line for line in out.splitlines() if "learner has waited" in line)
    print(warning)
    assert warning.startswith("[rlyard] warning:")
    for part in ("step 1 at policy version 0", "0 of 2 groups kept", "outstanding (limit 4", "queued in the buffer", "rejected",
                 "max_staleness=1", "staleness_policy=wait", "1 of 1 workers busy"):
        assert part in warning, (part, warning)


def test_a_weight_update_that_waits_too_long_says_what_it_waits_for(capsys, monkeypatch):
    """partial_rollouts=false holds the weights for a whole group: the learner's push waits for it."""
    class Engine:
        policy_version = 0

        def update_weights(self, version, state_dict=None):
            self.policy_version = version

    monkeypatch.setattr(workers, "LEARNER_WAIT_WARNING_S", 0.1)
    shared = SharedEngine(Engine())
    with shared.pinned():
        pusher = threading.Thread(target=shared.update_weights, args=(1,))
        pusher.start()
        deadline = time.monotonic() + 10
        while "has waited" not in (out := capsys.readouterr().out) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pusher.is_alive() and shared.policy_version == 0
    pusher.join(5)
    assert shared.policy_version == 1
    assert "[rlyard] warning: the weight update to policy version 1 has waited" in out
    assert "for 1 rollout threads that hold the weights" in out


def test_settling_a_ticket_twice_releases_its_slot_once():
    class Stream:
        def next(self, k):
            return [object()] * k

    source = TaskSource(Stream(), first_seq=0, version=0, limit=2)
    a, b = source.take(), source.take()
    assert source.outstanding == 2
    source.settle([a])
    source.settle([a])  # a rejected group that is trained after all (dynamic sampling's fallback)
    assert source.outstanding == 1
    source.settle([b, a])
    assert source.outstanding == 0


def test_the_warning_names_a_deadlock_between_producers_and_learner():
    """The shape of the old hang: the limit is reached, the buffer is empty and no worker is busy."""
    import queue
    from types import SimpleNamespace

    from rlyard.orchestrate.workers import RolloutPool, Worker

    class Stream:
        def next(self, k):
            return [object()] * k

    pool = RolloutPool.__new__(RolloutPool)
    pool.config = load_config(None, ["orchestrate.mode=async", "orchestrate.staleness_policy=wait", "orchestrate.max_staleness=1"])
    pool.source = TaskSource(Stream(), first_seq=0, version=0, limit=2)
    pool.source.take(), pool.source.take()
    pool.buffer, pool.workers, pool.finished_groups = queue.Queue(maxsize=4), [Worker(0), Worker(1)], 2
    pool.engine = SimpleNamespace(policy_version=3)
    message = pool.wait_warning(61.0)
    assert "waited 61.0 s for a group: policy version 3" in message
    assert "2 groups outstanding (limit 2" in message and "0 of 2 workers busy" in message
    assert "a deadlock" in message
    pool.source.settle([Ticket(0, None, 0)])
    assert "a deadlock" not in pool.wait_warning(61.0)
