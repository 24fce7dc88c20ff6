"""env.grader_timeout_s: a score() that hangs fails its own episode as infra, and the run goes on.

The hang kind of rlyard.testing.faults sleeps `hang_s` in score(); here it sleeps far past the
deadline, so every hung episode must come back infra with the deadline's message, in single-
and multi-turn runs alike, while the others are scored as usual."""
from __future__ import annotations

import json
import time

import pytest

from rlyard.config import load_config
from rlyard.environment.deadline import GraderTimeout, within
from rlyard.orchestrate.entry import train
from rlyard.testing import faults
from rlyard.testing.tiny import save_tiny_llama


def test_within_returns_reraises_and_abandons():
    assert within(5.0, lambda: 7) == 7
    assert within(None, lambda: 8) == 8
    with pytest.raises(ZeroDivisionError):
        within(5.0, lambda: 1 / 0)
    started = time.perf_counter()
    with pytest.raises(GraderTimeout, match="did not answer within 0.2 s"):
        within(0.2, lambda: time.sleep(30))
    assert time.perf_counter() - started < 30  # abandoned, not waited for


@pytest.fixture(scope="module")
def stopping_model_dir(tmp_path_factory, tokenizer):
    return save_tiny_llama(tmp_path_factory.mktemp("stopping-llama"), tokenizer)


@pytest.mark.parametrize("env", ["rlyard.testing.faults:SINGLE", "rlyard.testing.faults:MULTI"])
def test_a_hung_grader_is_an_infra_episode_and_the_run_finishes(tmp_path, stopping_model_dir, env):
    faults.reset_ledger()
    config = load_config(None, [
        f"model.name={stopping_model_dir}", f"env.name={env}", "env.train_size=8", "env.options.fault_rate=0.16",
        "env.options.hang_s=60", "env.grader_timeout_s=0.3", "rollout.prompts_per_step=2", "rollout.n=8",
        "rollout.max_new_tokens=6", "agent.max_tokens_per_turn=6", "eval.size=0", "output.progress=false",
        "output.plot=false", "model.lora.enabled=false", "train.steps=2"])
    result = train(config, tmp_path)
    assert result.steps == 2
    rows = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    timed_out = [r for r in rows if "did not answer within 0.3 s" in r["completion"]]
    hangs = sum(kind == "hang" for kind in faults.LEDGER.values())
    assert hangs > 0 and len(timed_out) == hangs
    assert all(r["infra_error"] and r["finish_reason"] == "infra_error" for r in timed_out)
    assert len(rows) == 32 and any(not r["infra_error"] for r in rows)
