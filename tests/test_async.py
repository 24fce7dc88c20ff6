"""Async mode end to end: tiny llama, real threads, toy families with random grader delays.

Every run here checks its trajectories.jsonl: which policy versions sampled each trained episode
and at which version it was trained, so the staleness bound is checked on every trained batch.
"""
from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from rlyard.config import load_config
from rlyard.envs import Family, SingleTurnEnv, register
from rlyard.orchestrate.entry import train

from conftest import toy_tasks, toy_verify

pytestmark = pytest.mark.timeout(180)

_delays = random.Random(0)


def slow_verify(reply, task):
    """The toy verdict after a random grader delay (0-40 ms, long-tailed)."""
    time.sleep(min(0.04, _delays.expovariate(1 / 0.008)))
    return toy_verify(reply, task)


register(Family(name="toy_slow", make_tasks=toy_tasks, make_env=lambda: SingleTurnEnv(slow_verify), verify=slow_verify))


class Killer:
    """make_env raises on the listed calls: the exception escapes rollout() and kills its worker."""

    def __init__(self, on_calls):
        self.on_calls, self.calls, self.lock = set(on_calls), 0, threading.Lock()

    def __call__(self):
        with self.lock:
            self.calls += 1
            if self.calls in self.on_calls or "always" in self.on_calls:
                raise RuntimeError(f"environment killed its worker (call {self.calls})")
        return SingleTurnEnv(slow_verify)


KILL_TWICE = Killer({5, 21})
ALWAYS = Killer({"always"})
register(Family(name="toy_killer", make_tasks=toy_tasks, make_env=KILL_TWICE, verify=toy_verify))
register(Family(name="toy_always_dies", make_tasks=toy_tasks, make_env=ALWAYS, verify=toy_verify))


def async_config(model_dir: Path, run_dir: Path, *overrides: str):
    return load_config(None, [
        f"model.name={model_dir}", "env.name=toy_slow", "env.train_size=8", "rollout.prompts_per_step=2", "rollout.n=4",
        "rollout.max_new_tokens=6", "eval.size=0", "output.progress=false", "output.plot=false", f"output.run_dir={run_dir}",
        "model.lora.enabled=false", "algo.lr=1e-2", "orchestrate.mode=async", *overrides,
    ])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_trained_batches(run_dir: Path, config) -> list[dict]:
    """Every trained episode: staleness <= max_staleness, trained at version step - 1, groups whole."""
    rows, n, bound = read_jsonl(run_dir / "trajectories.jsonl"), config.rollout.n, config.orchestrate.max_staleness
    groups = defaultdict(list)
    for row in rows:
        assert row["trained_at_version"] == row["step"] - 1
        assert row["policy_versions"], row  # every toy episode sampled at least one token
        assert row["trained_at_version"] - min(row["policy_versions"]) <= bound, row
        groups[(row["step"], row["group_id"])].append(row)
    for members in groups.values():
        assert len(members) == n  # groups are complete before they are trained on
    per_step = defaultdict(set)
    for step, group_id in groups:
        per_step[step].add(group_id)
    assert all(len(ids) == config.rollout.prompts_per_step for ids in per_step.values())
    assert len({gid for _, gid in groups}) == len(groups)  # a group is trained at most once
    return rows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_staleness_bound_holds_on_every_trained_batch(tmp_path, tiny_model_dir, seed):
    rng = random.Random(seed)
    bound, policy = rng.choice([0, 1, 2]), rng.choice(["drop", "wait"])
    config = async_config(tiny_model_dir, tmp_path, "train.steps=5", f"orchestrate.max_staleness={bound}",
                          f"orchestrate.staleness_policy={policy}", f"orchestrate.workers={rng.randint(1, 4)}",
                          f"orchestrate.buffer_groups={rng.randint(1, 4)}", f"algo.decoupled={rng.choice(['true', 'false'])}")
    result = train(config, tmp_path)
    assert result.steps == 5
    rows = check_trained_batches(tmp_path, config)
    assert len(rows) == 5 * 2 * 4
    metrics = [m for m in read_jsonl(tmp_path / "metrics.jsonl") if "rollout/staleness_max" in m]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5]
    assert all(m["rollout/staleness_max"] <= bound for m in metrics)
    assert not [t for t in threading.enumerate() if t.name.startswith("rlyard-rollout")]  # all joined


def test_async_runs_ahead_and_trains_on_older_versions(tmp_path, tiny_model_dir):
    """With room to run ahead (4 workers, a deep buffer), some trained tokens are behind the learner
    (otherwise the run is sync in disguise), but never by more than the bound."""
    config = async_config(tiny_model_dir, tmp_path, "train.steps=6", "orchestrate.max_staleness=3", "orchestrate.workers=4",
                          "orchestrate.buffer_groups=6", "algo.decoupled=true")
    train(config, tmp_path)
    rows = check_trained_batches(tmp_path, config)
    assert max(r["trained_at_version"] - min(r["policy_versions"]) for r in rows) >= 1
    metrics = [m for m in read_jsonl(tmp_path / "metrics.jsonl") if "reward/mean" in m]
    assert all(0.0 < m["train/behaviour_weight_mean"] < 10.0 for m in metrics if m["loss/policy"] != 0.0)
    assert metrics[-1]["progress/samples"] == 6 * 8


def test_a_killed_worker_is_replaced_and_the_run_finishes(tmp_path, tiny_model_dir, capsys):
    KILL_TWICE.calls = 0
    config = async_config(tiny_model_dir, tmp_path, "env.name=toy_killer", "train.steps=4", "orchestrate.workers=2")
    result = train(config, tmp_path)
    assert result.steps == 4
    check_trained_batches(tmp_path, config)
    last = read_jsonl(tmp_path / "metrics.jsonl")[-1]
    assert last["rollout/worker_restarts"] == 2.0 and last["rollout/requeued_total"] >= 2.0
    assert capsys.readouterr().out.count("died; restarting it") == 2
    assert not [t for t in threading.enumerate() if t.name.startswith("rlyard-rollout")]


def test_workers_that_keep_dying_stop_the_run_with_the_cause(tmp_path, tiny_model_dir):
    config = async_config(tiny_model_dir, tmp_path, "env.name=toy_always_dies", "train.steps=2", "orchestrate.max_worker_restarts=3")
    started = time.perf_counter()
    with pytest.raises(RuntimeError, match=r"max_worker_restarts=3(.|\n)*environment killed its worker"):
        train(config, tmp_path)
    assert time.perf_counter() - started < 30
    time.sleep(0.2)
    assert not [t for t in threading.enumerate() if t.name.startswith("rlyard-rollout") and t.is_alive()]


def test_ctrl_c_stops_the_run_without_hanging(tmp_path, tiny_model_dir):
    config = async_config(tiny_model_dir, tmp_path, "train.steps=10000", "orchestrate.workers=3")
    metrics = tmp_path / "metrics.jsonl"

    def interrupt_after_two_steps():
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    # A shell starts background jobs with SIGINT ignored, and Python then installs no handler of its
    # own: this test must not depend on how the suite was launched.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_after_two_steps, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            train(config, tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    interrupted = time.perf_counter()
    assert not [t for t in threading.enumerate() if t.name.startswith("rlyard-rollout")]
    assert time.perf_counter() - interrupted < 1.0
    assert len(read_jsonl(metrics)) >= 2


def test_checkpoint_and_resume(tmp_path, tiny_model_dir):
    common = ["output.checkpoint_every=2", "orchestrate.workers=2"]
    train(async_config(tiny_model_dir, tmp_path, *common, "train.steps=2"), tmp_path)
    config = async_config(tiny_model_dir, tmp_path, *common, "train.steps=4")
    train(config, tmp_path, resume=True)
    assert [m["step"] for m in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    check_trained_batches(tmp_path, config)
    import torch

    state = torch.load(tmp_path / "checkpoints" / "step_000004" / "state.pt", weights_only=False)
    assert state["policy_version"] == 4


def test_dynamic_sampling_and_infra_failures_in_async_mode(tmp_path, tiny_model_dir):
    """toy_broken fails about half its episodes: they leave their group; a group is trained only
    if its valid members' rewards differ (DAPO; or it has one valid member), never when all failed."""
    config = async_config(tiny_model_dir, tmp_path, "env.name=toy_broken", "rollout.n=6", "train.steps=3",
                          "algo.dynamic_sampling=true", "algo.max_sampling_tries=50", "orchestrate.workers=3")
    train(config, tmp_path)
    rows = check_trained_batches(tmp_path, config)
    assert any(r["infra_error"] for r in rows)
    groups = defaultdict(list)
    for r in rows:
        groups[r["group_id"]].append(r)
    for members in groups.values():
        valid = [r["reward"] for r in members if not r["infra_error"]]
        assert len(valid) == 1 or len(set(valid)) > 1, members  # a lone valid member is kept (verl's rule)
    metrics = [m for m in read_jsonl(tmp_path / "metrics.jsonl") if "reward/mean" in m]
    assert sum(m["rollout/dropped_groups"] + m["rollout/failed_groups_dropped"] for m in metrics) >= 1
