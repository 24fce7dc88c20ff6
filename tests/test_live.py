"""`rlyard serve --learn`: a real openai client drives arith traffic, posts the verifier's rewards,
and the served policy trains between its requests (the tiny model: mechanics, not learning;
bench/live.py shows the embedded model learning). Then a SIGKILL mid-run and a restart on the
same run folder: it resumes from its newest checkpoint and no posted reward is lost or trained twice.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from rlyard.config import load_config
from rlyard.envs import get_family
from rlyard.envs.arith.verify import verify
from rlyard.train.checkpoint import latest_checkpoint

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
ROOT = Path(__file__).resolve().parent.parent


def overrides(model_dir: Path) -> list[str]:
    return [f"model.name={model_dir}", "live.sessions_per_step=4", "eval.size=0", "output.checkpoint_every=1",
            "output.keep_checkpoints=20", "output.plot=false", "output.progress=false", "orchestrate.max_staleness=0",
            "train.steps=50", "model.autocast=none"]


def arith_tasks(split: str, n: int):
    return get_family("arith").make_tasks(split, n, 0, ops="+", min_value=10, max_value=99)


def status(url: str) -> dict:
    return httpx.get(f"{url}/admin/status", headers=AUTH, timeout=30).json()


def wait_version(url: str, version: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = status(url)
        assert now["learner_error"] is None, now["learner_error"]
        if now["policy_version"] >= version:
            return now
        time.sleep(0.1)
    raise AssertionError(f"policy version {version} not reached: {now}")


def play_group(url: str, sid: str, task, n: int = 4, model: str = "policy") -> list[dict]:
    """n samples of one arith task as a session group; each choice's verifier reward posted."""
    client = OpenAI(base_url=f"{url}/sessions/{sid}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model=model, messages=task.prompt, n=n, max_tokens=8, temperature=1.0, seed=1)
    return [httpx.post(f"{url}/v1/sessions/{sid}.{i}/reward", headers=AUTH, timeout=30,
                       json={"reward": verify(c.message.content, task).value}).json() for i, c in enumerate(reply.choices)]


def play_lone(url: str, sid: str, task, model: str, post: bool = True) -> dict | None:
    client = OpenAI(base_url=f"{url}/sessions/{sid}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model=model, messages=task.prompt, max_tokens=8, temperature=1.0, seed=2)
    if not post:
        return None
    return httpx.post(f"{url}/v1/sessions/{sid}/reward", headers=AUTH, timeout=30,
                      json={"reward": verify(reply.choices[0].message.content, task).value, "components": {"x": 1.0}}).json()


def probe(url: str, model: str, tasks) -> tuple[float, list[float]]:
    """Held-out success, greedy, through the same server (no session: nothing recorded or trained)."""
    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    hits, logprobs = [], []
    for task in tasks:
        reply = client.chat.completions.create(model=model, messages=task.prompt, max_tokens=8, temperature=0, logprobs=True)
        hits.append(verify(reply.choices[0].message.content, task).value)
        logprobs += [t.logprob for t in reply.choices[0].logprobs.content]
    return sum(hits) / len(hits), logprobs


def test_live_loop_versions_rewards_staleness_and_routes(tiny_model_dir, tmp_path):
    from rlyard.live.service import LiveService

    config = load_config(ROOT / "configs" / "quickstart.yaml", overrides(tiny_model_dir))
    service = LiveService(config, tmp_path / "run", KEY, port=0, model_name="policy").start()
    url, train, held_out = service.url, arith_tasks("train", 8), arith_tasks("eval", 2)
    try:
        _, base_logprobs = probe(url, "policy", held_out)
        play_lone(url, "old", train[0], "policy", post=False)  # sampled at version 0, rewarded after version 1
        assert all(r["duplicate"] is False and r["policy_versions"] == [0] for r in play_group(url, "g0", train[1]))
        wait_version(url, 1)
        probe(url, "policy", held_out)  # between updates
        old = httpx.post(f"{url}/v1/sessions/old/reward", headers=AUTH, json={"reward": 0.0}).json()
        assert old["policy_versions"] == [0]
        play_group(url, "g1", train[2])
        now = wait_version(url, 2)
        assert now["stale_dropped"] == 1 and now["trained_sessions"] == 8 and now["rewards_posted"] == 9
        # idempotent repeat, changed reward, unknown session, closed session, no key, wrong key, bad body
        first = httpx.post(f"{url}/v1/sessions/g0.1/reward", headers=AUTH, json={"reward": 5.0})
        assert first.status_code == 409 and first.json()["error"]["code"] == "already_rewarded"
        journaled = json.loads((tmp_path / "run" / "rewards.jsonl").read_text().splitlines()[1])
        again = httpx.post(f"{url}/v1/sessions/g0.1/reward", headers=AUTH, json={"reward": journaled["reward"]})
        assert again.status_code == 200 and again.json()["duplicate"] is True
        assert httpx.post(f"{url}/v1/sessions/nobody/reward", headers=AUTH, json={"reward": 1.0}).status_code == 404
        assert httpx.post(f"{url}/v1/sessions/g0.1/reward", json={"reward": 1.0}).status_code == 401
        assert httpx.post(f"{url}/v1/sessions/g0.1/reward", headers={"X-API-Key": "nope"}, json={"reward": 1.0}).status_code == 401
        assert httpx.get(f"{url}/admin/status").status_code == 401
        assert httpx.post(f"{url}/v1/sessions/g0.1/reward", headers=AUTH, json={"reward": "high"}).status_code == 400
        closed = OpenAI(base_url=f"{url}/sessions/g0.1/v1", api_key="unused", max_retries=0)
        with pytest.raises(Exception, match="409"):
            closed.chat.completions.create(model="policy", messages=train[0].prompt, max_tokens=2)
        # the server grades a closed session itself when it names its task
        client = OpenAI(base_url=f"{url}/sessions/graded/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(model="policy", messages=train[3].prompt, max_tokens=8, metadata={"task": train[3].id})
        graded = httpx.post(f"{url}/v1/sessions/graded/close", headers=AUTH, json={}).json()
        assert graded["source"] == "grader" and graded["reward"] == verify(reply.choices[0].message.content, train[3]).value
        # every trained or dropped turn was sampled by one version (in-flight requests kept theirs)
        for line in (tmp_path / "run" / "rewards.jsonl").read_text().splitlines():
            for t in json.loads(line)["trajectories"]:
                assert len({v for v, m in zip(t["policy_versions"], t["loss_mask"]) if m}) == 1
        # rollback to version 0: a new version that serves version 0's weights
        back = httpx.post(f"{url}/admin/rollback", headers=AUTH, json={"version": 0}).json()
        assert back["weights_of"] == 0 and back["version"] == 3
        assert back["dropped_sessions"] == 1  # the graded session, sampled by version 2: abandoned
        assert httpx.post(f"{url}/admin/rollback", headers=AUTH, json={"version": 99}).status_code == 404
        _, rolled_back = probe(url, "policy", held_out)
        assert rolled_back == pytest.approx(base_logprobs, abs=1e-4)
        assert status(url)["checkpoints"] == [0, 1, 2, 3]
    finally:
        service.close()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "live/sessions" in r] == [1, 2]
    assert rows[-1]["live/rollback_to"] == 0.0
    trained = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert len(trained) == 8 and all(row["completion"] for row in trained)  # the reply text, for rlyard view
    dropped = [json.loads(line) for line in (tmp_path / "run" / "dropped.jsonl").read_text().splitlines()]
    assert [(d["dropped"], d["task_id"]) for d in dropped] == [("stale", "old"), ("rolled_back", "graded")]


def start_server(model_dir: Path, run_dir: Path) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "rlyard.cli", "serve", "--learn", str(ROOT / "configs" / "quickstart.yaml"),
               *overrides(model_dir), "--api-key", KEY, "--run-dir", str(run_dir), "--port", "0", "--model-name", "policy"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RLYARD_TEST_THREADS": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    lines = []
    for line in process.stdout:
        lines.append(line)
        found = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
        if found:
            return process, found.group(1)
    raise AssertionError("the server did not start:\n" + "".join(lines))


def test_sigkill_and_restart_lose_no_reward_and_train_none_twice(tiny_model_dir, tmp_path):
    run_dir, train = tmp_path / "run", arith_tasks("train", 8)
    process, url = start_server(tiny_model_dir, run_dir)
    try:
        play_group(url, "a", train[0])
        wait_version(url, 1)
        posted = {f"a.{i}" for i in range(4)} | {f"b.{i}" for i in range(4)} | {"c"}
        play_group(url, "b", train[1])
        play_lone(url, "c", train[2], "policy")  # pending: not enough for a step
    finally:
        process.send_signal(signal.SIGKILL)  # mid-run: b may or may not be trained and checkpointed
        process.wait()
    journal = [json.loads(line)["session"] for line in (run_dir / "rewards.jsonl").read_text().splitlines()]
    assert set(journal) == posted and len(journal) == 9  # every 2xx was on disk
    newest = int(latest_checkpoint(run_dir).name.removeprefix("step_"))
    process, url = start_server(tiny_model_dir, run_dir)
    try:
        resumed = status(url)  # with b replayed, the learner may already be training its next version
        assert resumed["started_at_version"] == newest >= 1 and resumed["policy_version"] >= newest
        assert resumed["rewards_posted"] == 9 and resumed["replayed_at_start"] in (1, 5)
        repeat = httpx.post(f"{url}/v1/sessions/c/reward", headers=AUTH, json={"reward": json.loads(
            (run_dir / "rewards.jsonl").read_text().splitlines()[-1])["reward"], "components": {"x": 1.0}})
        assert repeat.json()["duplicate"] is True  # a client retrying after the crash is answered as before
        for k, sid in enumerate(["d", "e", "f"]):
            play_lone(url, sid, train[3 + k], "policy")
        final = wait_version(url, newest + (resumed["replayed_at_start"] + 3) // 4)  # 4 sessions a step
        assert final["pending_sessions"] == 0 and final["rewards_posted"] == 12
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    trained = [json.loads(line)["session"] for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(trained) == sorted(posted | {"d", "e", "f"})  # each posted reward trained exactly once


def test_baselines_follow_their_formulas():
    from rlyard.live.baselines import Baseline

    rloo = Baseline("rloo", window=3, alpha=0.2)
    assert rloo.advantages([1.0], ["p"]) == [0.0]  # nothing to compare with
    assert rloo.advantages([0.0, 1.0], ["p", "q"]) == pytest.approx([0.0 - 2 / 2, 1.0 - 1 / 2])  # pool 1, 0, 1
    assert list(rloo.history) == [1.0, 0.0, 1.0]
    assert rloo.advantages([0.0], ["p"]) == pytest.approx([0.0 - 2 / 3])  # the window keeps the last 3
    per_prompt = Baseline("per_prompt", window=4, alpha=0.5)
    assert per_prompt.advantages([1.0, 1.0], ["p", "p"]) == pytest.approx([1.0, 0.5])  # V(p): 0 -> 0.5 -> 0.75
    assert per_prompt.advantages([0.0], ["q"]) == pytest.approx([-1.0])  # a new prompt starts at the window's mean
    restored = Baseline("per_prompt", window=4, alpha=0.5)
    restored.load_state_dict(per_prompt.state_dict())
    assert restored.advantages([1.0], ["p"]) == per_prompt.advantages([1.0], ["p"])


def test_journal_drops_a_line_cut_by_a_kill(tmp_path):
    from rlyard.live.journal import RewardJournal
    from rlyard.types import Trajectory

    journal = RewardJournal(tmp_path)
    row = Trajectory("s", "s", [1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.2], [-1, 0, 0])
    journal.append("a", 1.0, {"c": 1.0}, None, [row])
    journal.append("b", 0.0, {}, "g", [row])
    whole = journal.path.read_bytes()
    journal.path.write_bytes(whole + whole.splitlines(keepends=True)[0][:40])  # a third line, cut mid-write
    again = RewardJournal(tmp_path)
    assert [e.session for e in again.unconsumed(set())] == ["a", "b"] and journal.path.read_bytes() == whole
    assert again.unconsumed({0})[0].trajectories[0] == row and again.get("b").group == "g"
    with pytest.raises(KeyError):
        again.append("a", 1.0, {}, None, [row])
