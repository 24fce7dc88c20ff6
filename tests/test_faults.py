"""Injected faults (rlyard/testing/faults.py): every broken episode is flagged infra, none is lost,
none is trained as a score, and the run finishes; single-turn, multi-turn and async.

Also the reward check itself (rollout.checked / verdict_problem) on hand-made verdicts.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from rlyard.config import load_config
from rlyard.orchestrate.rollout import checked, verdict_problem
from rlyard.orchestrate.entry import train
from rlyard.testing import faults
from rlyard.testing.tiny import save_tiny_llama
from rlyard.types import Reward, Trajectory

SINGLE, MULTI = "rlyard.testing.faults:SINGLE", "rlyard.testing.faults:MULTI"


def fault_config(model_dir: Path, run_dir: Path, env: str, *overrides: str):
    return load_config(None, [
        f"model.name={model_dir}", f"env.name={env}", "env.train_size=8", "env.options.fault_rate=0.1", "env.options.hang_s=0.05",
        "rollout.prompts_per_step=2", "rollout.n=8", "rollout.max_new_tokens=6", "agent.max_tokens_per_turn=6", "eval.size=0",
        "output.progress=false", "output.plot=false", f"output.run_dir={run_dir}", "model.lora.enabled=false", "algo.lr=1e-2",
        *overrides,
    ])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- the reward check
def _traj(reward, components=None) -> Trajectory:
    return Trajectory(task_id="t", group_id="g", token_ids=[1, 2], loss_mask=[0, 1], behaviour_logprobs=[0.0, -1.0],
                      policy_versions=[-1, 0], reward=reward, components=components or {}, completion_text="reply")


@pytest.mark.parametrize("reward, components, says", [
    (math.nan, {}, "nan, not a finite number"), (math.inf, {}, "inf, not a finite number"), ("1.0", {}, "'1.0', not a finite"),
    (None, {}, "None, not a finite"), (True, {}, "True, not a finite"), (1.0, {"hit": math.nan}, "{'hit': nan} are not finite"),
    (1.0, {"hit": "yes"}, "{'hit': 'yes'} are not finite"),
])
def test_a_reward_that_cannot_train_becomes_an_infra_episode(reward, components, says):
    [out] = checked([_traj(reward, components)])
    assert out.infra_error and out.finish_reason == "infra_error" and out.reward == 0.0 and out.components == {}
    assert says in out.info["error"] and "[invalid reward]" in out.completion_text


def test_a_good_reward_passes_untouched():
    good = _traj(0.5, {"hit": 1.0, "steps": 3})
    assert checked([good]) == [good]
    assert verdict_problem(Reward(0.0)) is None
    assert verdict_problem(Reward(math.nan, infra_error=True)) is None  # already infra: its value is never used
    assert "not a Reward" in verdict_problem(0.7) and "not a Reward" in verdict_problem(None)


def test_fault_draws_are_seeded_and_at_the_rate():
    a, b = faults.FaultPlan(0.1, seed=3, ledger={}), faults.FaultPlan(0.1, seed=3, ledger={})
    draws = [a.draw() for _ in range(6000)]
    assert draws == [b.draw() for _ in range(6000)]
    kinds = Counter(d[0] for d in draws if d)
    assert set(kinds) == set(faults.KINDS)
    assert all(480 <= kinds[k] <= 720 for k in faults.KINDS), kinds  # 600 expected each; 5 sigma ~ 115
    with pytest.raises(ValueError, match="must be between 0 and 1"):
        faults.FaultPlan(0.2)


def test_the_audit_catches_what_it_must():
    def row(completion, reward, infra, info=None):
        return {"group_id": "g", "completion": completion, "reward": reward, "infra_error": infra,
                "finish_reason": "infra_error" if infra else "stop", "info": info or {}}

    ledger = {0: "crash_score", 1: "hang", 2: "garbage", 3: "sandbox"}
    rows = [
        row("A\n[verifier error]\n[fault 0: crash_score] the grader crashed", 0.0, True),  # right
        row("A", 1.0, False, {"fault": "[fault 1: hang]"}),  # right
        row("B", 0.0, False, {"fault": "[fault 2: garbage]"}),  # garbage trained as a 0: mis-scored
        row("A", 0.0, False),  # no fault, but not the honest verdict: mis-scored
        row("A", float("nan"), False),  # mis-scored
        row("A", 1.0, True),  # flagged without a fault: mis-scored
        row("A\n[fault 0: crash_score]", 0.0, True),  # fault 0 twice: duplicated
    ]  # fault 3 has no row: lost
    result = faults.audit(rows, ledger)
    assert (result.mis_scored, result.lost, result.duplicated, result.survived) == (4, 1, 1, 3)
    assert faults.audit(rows[:2], {0: "crash_score", 1: "hang"}).as_dict()["problems"] == []


# --------------------------------------------------------------------------- runs with faults
@pytest.fixture(scope="module")
def stopping_model_dir(tmp_path_factory, tokenizer) -> Path:
    """A tiny llama that ends its replies (rlyard/testing/tiny.py): multi-turn episodes reach step."""
    return save_tiny_llama(tmp_path_factory.mktemp("stopping-llama"), tokenizer)


def check_audit(run_dir: Path, drawn_elsewhere=frozenset()) -> faults.Audit:
    rows = read_jsonl(run_dir / "trajectories.jsonl")
    result = faults.audit(rows, dict(faults.LEDGER), drawn_elsewhere)
    assert result.lost == result.mis_scored == result.duplicated == 0, result.problems
    assert set(result.by_kind) == set(faults.KINDS), result.by_kind  # every kind was exercised
    assert result.infra_flagged == sum(1 for k in faults.LEDGER.values() if k in faults.INFRA_KINDS) - len(
        [i for i in drawn_elsewhere if faults.LEDGER[i] in faults.INFRA_KINDS])
    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "rollout/infra_errors" in m]
    for m in metrics:
        step_rows = [r for r in rows if r["step"] == m["step"]]
        assert m["rollout/infra_errors"] == sum(r["infra_error"] for r in step_rows)
        valid = [r["reward"] for r in step_rows if not r["infra_error"]]
        assert m["reward/mean"] == pytest.approx(sum(valid) / len(valid))  # the infra episodes are no zeros
        assert math.isfinite(m["loss/policy"])
    return result


@pytest.mark.parametrize("env, steps", [(SINGLE, 4), (MULTI, 3)])
def test_a_sync_run_with_ten_percent_of_each_fault_loses_nothing(tmp_path, stopping_model_dir, env, steps):
    faults.reset_ledger()
    config = fault_config(stopping_model_dir, tmp_path, env, f"train.steps={steps}", "env.options.fault_seed=1")
    result = train(config, tmp_path)
    assert result.steps == steps
    audited = check_audit(tmp_path)
    assert audited.episodes == steps * 16 and audited.survived == audited.injected > 0
    if env == MULTI:
        rows = read_jsonl(tmp_path / "trajectories.jsonl")
        assert any(len(r["info"].get("graded", [])) == 2 for r in rows)  # some episodes had both turns


def test_an_async_run_with_faults_records_every_trained_and_dropped_group(tmp_path, tiny_model_dir):
    """80% of the episodes infra (rate 0.16 of each kind), groups of 2: many groups fail whole and
    the learner drops them; their rows go to dropped.jsonl ("all_infra"), as many as the metrics
    count. Groups still in flight when the run ends are abandoned (pending in the checkpoint), so
    the ledger is not matched exactly here; every recorded fault is flagged right."""
    faults.reset_ledger()
    config = fault_config(tiny_model_dir, tmp_path, SINGLE, "train.steps=3", "rollout.n=2", "orchestrate.mode=async",
                          "orchestrate.workers=2", "env.options.fault_rate=0.16", "env.options.fault_seed=2")
    train(config, tmp_path)
    trained, dropped = read_jsonl(tmp_path / "trajectories.jsonl"), read_jsonl(tmp_path / "dropped.jsonl")
    result = faults.audit(trained + dropped, dict(faults.LEDGER), drawn_elsewhere=set(faults.LEDGER))
    assert result.mis_scored == result.duplicated == 0, result.problems
    assert result.survived > 0 and len(trained) == 3 * 2 * 2
    metrics = [m for m in read_jsonl(tmp_path / "metrics.jsonl") if "rollout/failed_groups_dropped" in m]
    failed_groups = {(r["step"], r["group_id"]) for r in dropped if r["dropped"] == "all_infra"}
    assert len(failed_groups) == sum(m["rollout/failed_groups_dropped"] for m in metrics) > 0
    assert all(r["infra_error"] for r in dropped if r["dropped"] == "all_infra")
