"""Family.score_group: a group step once every member has finished, in sync and async runs alike.

toy_ranked's group step pays each member its length rank in the group (ties share the lower
rank), which no member can know alone; toy_group_broken's group step raises, which must fail
its whole group as infra (never train a 0)."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from rlyard.config import load_config
from rlyard.envs import Family, SingleTurnEnv, register
from rlyard.orchestrate.entry import train

from conftest import toy_tasks, toy_verify

pytestmark = pytest.mark.timeout(300)


def rank_by_length(task, trajectories):
    lengths = [t.num_sampled_tokens for t in trajectories]
    return [replace(t, reward=sum(other < length for other in lengths) / (len(lengths) - 1),
                    components={**t.components, "group_size": float(len(trajectories))})
            for t, length in zip(trajectories, lengths)]


def broken_group_step(task, trajectories):
    raise RuntimeError("the group judge crashed")


register(Family(name="toy_ranked", make_tasks=toy_tasks, make_env=lambda: SingleTurnEnv(toy_verify), verify=toy_verify,
                score_group=rank_by_length))
register(Family(name="toy_group_broken", make_tasks=toy_tasks, make_env=lambda: SingleTurnEnv(toy_verify), verify=toy_verify,
                score_group=broken_group_step))


def run(tiny_model_dir, run_dir, *overrides):
    config = load_config(None, [
        f"model.name={tiny_model_dir}", "env.train_size=8", "rollout.prompts_per_step=2", "rollout.n=4",
        "rollout.max_new_tokens=8", "rollout.temperature=1.0", "eval.size=0",
        "output.progress=false", "output.plot=false", "model.lora.enabled=false",
        "train.steps=2", *overrides])
    train(config, run_dir)
    # families write their artefacts under the run folder, told through task.metadata["run_dir"], not os.environ
    assert os.environ.get("RLYARD_RUN_DIR") != str(run_dir.resolve())  # each task carries it (tests/test_late_graders.py)
    return [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_group_step_sees_every_finished_member(tiny_model_dir, tmp_path, mode):
    rows = run(tiny_model_dir, tmp_path / mode, "env.name=toy_ranked", f"orchestrate.mode={mode}")
    groups: dict = {}
    for row in rows:
        groups.setdefault((row["step"], row["group_id"]), []).append(row)
    assert len(groups) == 4 and all(len(members) == 4 for members in groups.values())
    for members in groups.values():
        lengths = [m["num_tokens"] for m in members]
        for member in members:
            assert member["components"]["group_size"] == 4.0
            assert member["reward"] == pytest.approx(sum(other < member["num_tokens"] for other in lengths) / 3)


def test_a_group_step_that_raises_fails_its_group_as_infra(tiny_model_dir, tmp_path):
    rows = run(tiny_model_dir, tmp_path / "broken", "env.name=toy_group_broken", "train.steps=1")
    assert len(rows) == 8
    assert all(r["infra_error"] and r["finish_reason"] == "infra_error" for r in rows)
    assert all("the group judge crashed" in r["completion"] for r in rows)
