"""`rlyard collect`: oracle demonstrations that replay through a fresh env and score 1, train split
only, failures counted apart, atomic writes, and recorded `rlyard serve` sessions over real HTTP."""
from __future__ import annotations

import argparse
import json
import threading

import pytest

from rlyard.demos.cli import add_parser, run
from rlyard.demos.collect import collect_oracle, write_jsonl
from rlyard.envs import Family, SingleTurnEnv, get_family, register
from rlyard.sandbox import bwrap_works
from rlyard.types import Reward, Task


def collect(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="rlyard")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(["collect", *argv, "--no-progress"]))


def read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def replay(family_name: str, record: dict, task: Task) -> None:
    """Reset a new env with the task, feed each assistant message, compare every tool message, score 1."""
    family = get_family(family_name)
    env = family.make_env()
    try:
        messages = record["messages"]
        prompt = env.reset(task)
        assert messages[:len(prompt)] == prompt
        k = len(prompt)
        while k < len(messages):
            assert messages[k]["role"] == "assistant"
            result = env.step(messages[k]["content"])
            k += 1
            assert messages[k:k + len(result.messages)] == result.messages
            k += len(result.messages)
            assert result.done == (k == len(messages))
        reward = env.score()
        assert reward.value == 1.0 and not reward.infra_error, reward
        assert record["metadata"]["turns"] == sum(m["role"] == "assistant" for m in messages)
    finally:
        env.close()


@pytest.mark.parametrize("options", [[], ["-o", "hops=2"], ["-o", "hops=2", "-o", "tool_format=bash_block"]])
def test_files_demonstrations_replay_through_a_fresh_env_and_score_1(tmp_path, capsys, options):
    out = tmp_path / "demos.jsonl"
    assert collect("files", *options, "-n", "20", "--seed", "3", "--out", str(out)) == 0
    assert "wrote 20 demonstrations" in capsys.readouterr().out
    records = read(out)
    opts = {"hops": 2} if "hops=2" in options else {}
    if "tool_format=bash_block" in options:
        opts["tool_format"] = "bash_block"
    tasks = {t.id: t for t in get_family("files").make_tasks("train", 20, 3, **opts)}
    assert sorted(r["metadata"]["task_id"] for r in records) == sorted(tasks)
    for record in records:
        meta = record["metadata"]
        assert set(record) == {"messages", "metadata"}  # the tool specs are in the system message already
        assert meta["env"] == "files" and meta["source"] == "oracle" and meta["seed"] == 3 and meta["reward"] == 1.0
        replay("files", record, tasks[meta["task_id"]])


def test_the_replies_vary_across_tasks(tmp_path):
    out = tmp_path / "demos.jsonl"
    assert collect("files", "-n", "20", "--out", str(out)) == 0
    records = read(out)
    first = {r["messages"][2]["content"] for r in records}
    assert len(first) > 10
    replies = [m["content"] for r in records for m in r["messages"] if m["role"] == "assistant"]
    for tool in ("grep", "bash", "read_file", "glob", "submit"):
        assert any(f'"name": "{tool}"' in reply for reply in replies), tool
    assert len({r["metadata"]["turns"] for r in records}) > 1
    again = tmp_path / "again.jsonl"
    assert collect("files", "-n", "5", "--out", str(again)) == 0
    assert read(again) == records[:5]  # seeded: the same tasks get the same replies
    assert collect("files", "-n", "5", "--seed", "1", "--out", str(again)) == 0
    assert read(again) != records[:5]


def test_only_train_split_tasks_are_used():
    from rlyard.envs.files.tasks import split_of

    report = collect_oracle("files", {"hops": 2}, n=15, seed=0)
    assert len(report.demos) == 15
    assert all(split_of(d["metadata"]["task_id"].split("-", 2)[2]) == "train" for d in report.demos)
    evals = {t.id.split("-", 2)[2] for t in get_family("files").make_tasks("eval", 200, 0, hops=2)}
    assert not evals & {d["metadata"]["task_id"].split("-", 2)[2] for d in report.demos}

    def leaky_tasks(split, n, seed, **options):
        return [Task(id=f"leak-{i}", prompt=[{"role": "user", "content": "x"}], env="leaky", metadata={"split": "eval"})
                for i in range(n)]

    verify = lambda reply, task: Reward(1.0)  # noqa: E731
    register(Family("leaky", leaky_tasks, lambda: SingleTurnEnv(verify), verify, oracle=lambda task, rng: ["x"]))
    with pytest.raises(RuntimeError, match="held-out"):
        collect_oracle("leaky", n=2)


def test_no_oracle_failures_and_infra_failures_are_said_apart(tmp_path, capsys):
    assert collect("arith", "-n", "2", "--out", str(tmp_path / "a.jsonl")) == 2
    assert "has no oracle" in capsys.readouterr().err and not (tmp_path / "a.jsonl").exists()

    def tasks(split, n, seed, **options):
        return [Task(id=f"{mode}-{i}", prompt=[{"role": "user", "content": "Say A."}], env="mixed", payload={"mode": mode},
                     metadata={"split": split}) for i, mode in enumerate(["ok", "wrong", "crash", "ok", "stuck"][:n])]

    def verify(reply, task):
        if task.payload["mode"] == "crash":
            raise RuntimeError("grader down")
        return Reward(float(reply == "A"))

    def oracle(task, rng):
        if task.payload["mode"] == "stuck":
            raise ValueError("no route for this task")
        return ["A" if task.payload["mode"] != "wrong" else "B"]

    register(Family("mixed", tasks, lambda: SingleTurnEnv(verify), verify, oracle=oracle))
    out = tmp_path / "mixed.jsonl"
    assert collect("mixed", "-n", "5", "--out", str(out)) == 1  # an oracle episode scored below 1
    printed = capsys.readouterr().out
    assert "wrote 2 demonstrations" in printed
    assert "1 scored below 1" in printed and "wrong-1" in printed
    assert "1 infrastructure failures" in printed and "crash-2: RuntimeError: grader down" in printed
    assert "1 the oracle cannot play" in printed and "stuck-4" in printed
    assert [r["metadata"]["task_id"] for r in read(out)] == ["ok-0", "ok-3"]


def test_writes_are_atomic(tmp_path):
    out = tmp_path / "demos.jsonl"
    assert write_jsonl(out, [{"a": 1}, {"b": 2}]) == 2
    assert read(out) == [{"a": 1}, {"b": 2}]

    def broken():
        yield {"c": 3}
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_jsonl(out, broken())
    assert read(out) == [{"a": 1}, {"b": 2}] and [p.name for p in tmp_path.iterdir()] == ["demos.jsonl"]


@pytest.mark.timeout(600)
@pytest.mark.skipif(not bwrap_works(), reason="the code family needs bubblewrap (scripts/setup.sh installs it)")
def test_code_demonstrations_replay_on_both_arms(tmp_path):
    """Three built-in train tasks, both harness arms among them, through `rlyard collect code`."""
    from rlyard.envs.code.env import choose_arm

    family = get_family("code")
    tasks = family.make_tasks("train", 3, 1)  # the arm is drawn from (seed, round, task): seed 1 gives both
    assert {choose_arm(t.payload, "", t.id) for t in tasks} == {"bash", "edit"}
    out = tmp_path / "code.jsonl"
    assert collect("code", "-n", "3", "--seed", "1", "--out", str(out)) == 0
    records = read(out)
    assert [r["metadata"]["task_id"] for r in records] == [t.id for t in tasks]
    for record, task in zip(records, tasks):
        arm = choose_arm(task.payload, "", task.id)
        assert ('"name": "edit_file"' in record["messages"][0]["content"]) == (arm == "edit")
        replay("code", record, task)


def test_sessions_of_a_real_server_become_demonstrations(tiny_model, tokenizer, tmp_path):
    openai = pytest.importorskip("openai")
    from rlyard.agent.loop import TemplateRenderer
    from rlyard.engines import HFEngine
    from rlyard.serve import RlyardServer, serve

    tools = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                                 "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
    app = RlyardServer(HFEngine(tiny_model, tokenizer.pad_token_id), tokenizer, "tiny", (2,), max_tokens_default=6,
                       record_dir=tmp_path / "recorded")
    httpd = serve(app, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        api = openai.OpenAI(base_url=f"{base}/sessions/ep-1/v1", api_key="unused", max_retries=0, timeout=60)
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List the files."}]
        first = api.chat.completions.create(model="tiny", messages=messages, tools=tools, max_tokens=6, seed=1)
        messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Again."}]
        api.chat.completions.create(model="tiny", messages=messages, tools=tools, max_tokens=6, seed=2)
        other = openai.OpenAI(base_url=f"{base}/sessions/ep-2/v1", api_key="unused", max_retries=0, timeout=60)
        other.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi."}], max_tokens=4, seed=3)

        from_url, from_dir = tmp_path / "url.jsonl", tmp_path / "dir.jsonl"
        assert collect("--sessions", base, "--out", str(from_url)) == 0
        assert collect("--sessions", str(tmp_path / "recorded"), "--out", str(from_dir)) == 0
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert from_url.read_text() == from_dir.read_text()
    records = read(from_url)
    assert [(r["metadata"]["task_id"], r["metadata"]["turns"], r["metadata"]["source"]) for r in records] == \
        [("ep-1", 2, "session"), ("ep-2", 1, "session")]
    conversation = records[0]["messages"]
    assert [m["role"] for m in conversation] == ["system", "user", "assistant", "user", "assistant"]
    assert conversation[0]["content"].startswith("You are terse.") and "<tools>" in conversation[0]["content"]
    # each assistant message is the exact text the policy sampled, decoded from the recorded tokens
    segment = app.sessions["ep-1"].segments[0]
    sampled, run = [], []
    for token, mask in zip(segment.token_ids, segment.loss_mask):
        if mask:
            run.append(token)
        elif run:
            sampled.append(run)
            run = []
    if run:
        sampled.append(run)
    assert [m["content"] for m in conversation if m["role"] == "assistant"] == \
        [tokenizer.decode(r, skip_special_tokens=True) for r in sampled]
    # the exported prompt renders to the very tokens the policy was given
    renderer = TemplateRenderer(tokenizer, (2,))
    prompt = renderer.prompt(conversation[:2])
    assert segment.token_ids[:len(prompt)] == prompt and not any(segment.loss_mask[:len(prompt)])
    assert records[1]["messages"][0] == {"role": "user", "content": "Hi."}  # no tools: no system message added
