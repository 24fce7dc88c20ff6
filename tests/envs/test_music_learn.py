"""The music family's learning parts: generated prompts held out by key x meter, the oracle
composer through the real grader (abc2midi), collect, validate -n, and the corpus-overlap helper."""
from __future__ import annotations

import json
import random
import shutil
import time

import pytest

from rlyard.demos.collect import collect_oracle
from rlyard.envs import get_family
from rlyard.envs.music.copying import corpus_overlap, top_tunes
from rlyard.envs.music.corpus import SAMPLE_PATH, split_tunes
from rlyard.envs.music.generate import MAX_N, combinations
from rlyard.envs.music.oracle import compose
from rlyard.envs.music.tasks import make_tasks
from rlyard.envs.music.validate import REFERENCE_MIN, validate
from rlyard.envs.music.verify import grade

pytestmark = pytest.mark.skipif(shutil.which("abc2midi") is None, reason="abc2midi (apt-get install abcmidi) is not installed")


def test_generated_prompts_are_distinct_stable_and_held_out_by_key_and_meter() -> None:
    train, held_out = make_tasks("train", 5000, 0, source="generated"), make_tasks("eval", 300, 0, source="generated")
    assert len({t.id for t in train}) == 5000 and len({t.id for t in held_out}) == 300
    assert not {t.metadata["combination"] for t in train} & {t.metadata["combination"] for t in held_out}
    assert {t.metadata["split"] for t in held_out} == {"eval"}
    assert len(combinations("eval", 10)) >= 8 and len(combinations("train", 10)) >= 100
    # the eval stream is the same whatever the seed; train streams differ by seed; ids are stable
    assert [t.id for t in make_tasks("eval", 20, 7, source="generated")] == [t.id for t in held_out[:20]]
    assert [t.id for t in make_tasks("train", 20, 0, source="generated")] == [t.id for t in train[:20]]
    assert [t.id for t in make_tasks("train", 20, 1, source="generated")] != [t.id for t in train[:20]]
    # the prompt names the fields it grades, in varied wording; the payload is the built-in rows' shape
    texts = [t.prompt[-1]["content"] for t in train[:200]]
    assert len({text.split("\n")[0][:40] for text in texts}) >= 6
    for task in train[:200]:
        constraints, text = task.payload["constraints"], task.prompt[-1]["content"]
        assert {"key", "meter", "bars"} <= set(constraints) and constraints["bars"]["bars"] in (6, 8)
        assert f"M:{constraints['meter']['meter']}" in text and "K:" in text and "```abc" in text
        assert set(task.payload) == {"constraints", "constraint_weight", "timeout_s"}
    with pytest.raises(ValueError, match="at most"):
        make_tasks("train", MAX_N + 1, 0, source="generated")


def test_100_oracle_tunes_pass_the_gate_meet_every_constraint_and_score_in_band() -> None:
    """Measured: 100 tunes composed and graded in about 8 s on the loaded 2-core machine."""
    tasks = make_tasks("train", 50, 3, source="generated") + make_tasks("eval", 50, 0, source="generated")
    started, rewards = time.perf_counter(), []
    for task in tasks:
        constraints = task.payload["constraints"]
        reward = grade(f"```abc\n{compose(constraints, random.Random(task.id))}\n```", constraints)
        assert not reward.info.get("reject") and not reward.infra_error, (task.id, reward.info)
        assert reward.info["unmet"] == {}, (task.id, reward.info["unmet"])
        assert reward.components["novelty"] == 1.0 and reward.components["variety"] > 0.9, (task.id, reward.components)
        rewards.append(reward.value)
    assert min(rewards) >= REFERENCE_MIN and sorted(rewards)[50] >= 0.9, sorted(rewards)[:5]
    assert time.perf_counter() - started < 120


def test_collect_and_validate_on_generated_prompts() -> None:
    report = collect_oracle("music", {"source": "generated"}, n=3, seed=1)
    assert len(report.demos) == 3 and not report.failed and not report.infra
    for demo in report.demos:
        assert demo["metadata"]["reward"] >= get_family("music").demo_min_reward
        assert "```abc\nX:1\n" in demo["messages"][-1]["content"]
    checks = validate({"source": "generated"}, n=4)
    assert len(checks) == 4 and all(c.ok for c in checks), [c.error for c in checks]
    assert all(c.base_reward == 0.0 and c.fixed_reward >= REFERENCE_MIN for c in checks)


def test_corpus_overlap_finds_a_corpus_tune_and_not_the_oracle(tmp_path) -> None:
    corpus_tune = split_tunes(SAMPLE_PATH.read_text())[0]
    copy = corpus_overlap(f"```abc\n{corpus_tune}\n```")
    assert copy["copied"] >= 0.9 and copy["run_bars"] >= 8 and copy["novelty"] == 0.0
    constraints = make_tasks("train", 1, 0, source="generated")[0].payload["constraints"]
    composed = compose(constraints, random.Random(0))
    fresh = corpus_overlap(f"```abc\n{composed}\n```")
    assert fresh["run_bars"] < 4 and fresh["novelty"] == 1.0
    assert corpus_overlap("no tune here") == {"reject": "no_tune"}
    rows = [{"task_id": "a", "reward": 0.2, "completion": f"```abc\n{composed}\n```"},
            {"task_id": "b", "reward": 0.9, "completion": f"```abc\n{corpus_tune}\n```"},
            {"task_id": "c", "reward": 0.5, "completion": f"```abc\n{composed}\n```"},  # the same text: listed once
            {"task_id": "d", "reward": 0.1, "completion": "nothing"}]
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    top = top_tunes(path, k=3)
    assert [t["task_id"] for t in top] == ["b", "c", "d"] and top[0]["run_bars"] >= 8 and top[2] == {**top[2], "reject": "no_tune"}
