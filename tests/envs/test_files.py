"""The multi-turn `files` family: real sandboxed tools, an oracle that solves it, a short run."""
import json

import pytest

from rlyard.envs import get_family
from rlyard.envs.files.tasks import split_of


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture
def task():
    return get_family("files").make_tasks("train", 1, seed=5)[0]


def test_an_oracle_agent_solves_it_through_the_tools(task):
    env = get_family("files").make_env()
    messages = env.reset(task)
    assert "<tools>" in messages[0]["content"] and "submit" in messages[0]["content"]
    found = env.step(call("grep", pattern=task.metadata["device"]))
    assert not found.done and task.metadata["device"] in found.messages[0]["content"]
    path = found.messages[0]["content"].splitlines()[1].split(":")[0]
    shown = env.step(call("read_file", path=path))
    serial = next(line.split(": ")[1] for line in shown.messages[0]["content"].splitlines() if "serial" in line)
    assert env.step(call("submit", answer=serial)).reason == "submitted"
    reward = env.score()
    assert reward.value == 1.0 and reward.components["tool_calls"] == 3 and reward.components["malformed_calls"] == 0
    env.close()


def test_wrong_answers_malformed_calls_and_silence(task):
    env = get_family("files").make_env()
    env.reset(task)
    bad = env.step('<tool_call>{"name": "grep", "arguments": </tool_call>')
    assert not bad.done and "tool call" in bad.messages[0]["content"].lower()
    unknown = env.step(call("rm_everything", path="/"))
    assert not unknown.done and "rm_everything" in unknown.messages[0]["content"]
    assert env.step(call("submit", answer="SN-000000")).done
    reward = env.score()
    assert reward.value == 0.0 and reward.components["malformed_calls"] == 2
    env.close()
    env.reset(task)
    assert env.step("I think it is SN-1.").reason == "no_tool_call"
    assert env.score().value == 0.0
    env.close()


def test_the_workspace_holds_the_tree_and_tools_stay_inside_it(task):
    env = get_family("files").make_env()
    env.reset(task)
    out = env.step(call("bash", command="cat /etc/hostname > /dev/null; ls inventory; touch ../escape 2>&1; echo rc=$?")).messages[0]["content"]
    assert "rc=0" not in out  # the workspace's parent is not writable
    workspace = env.workspace
    env.close()
    assert not workspace.exists()


def test_held_out_split_and_options():
    family = get_family("files")
    train = family.make_tasks("train", 50, seed=0)
    evals = family.make_tasks("eval", 20, seed=0)
    assert all(split_of(t.id.split("-", 2)[2]) == "train" for t in train)
    assert not {t.id.split("-", 2)[2] for t in train} & {t.id.split("-", 2)[2] for t in evals}
    with pytest.raises(ValueError, match="sites"):
        family.make_tasks("train", 1, seed=0, sites=99)
    with pytest.raises(ValueError, match="allowed"):
        family.make_tasks("train", 1, seed=0, colour="red")


def test_a_short_training_run_on_the_multi_turn_family(tiny_model_dir, tmp_path):
    from rlyard.config import load_config
    from rlyard.orchestrate.entry import train

    config = load_config("configs/files.yaml", [f"model.name={tiny_model_dir}", "train.steps=2", "eval.size=2",
                                                "rollout.max_new_tokens=8", "agent.max_tokens_per_turn=8", "output.progress=false"])
    result = train(config, tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert result.steps == 2 and len(rows) == 2 * 2 * 4
    assert all(r["finish_reason"] in ("no_tool_call", "turn_token_limit", "turn_limit", "token_budget", "submitted") for r in rows)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "reward/mean" in m] == [1, 2]
    step_rows = [m for m in metrics if "reward/mean" in m]
    for row in step_rows:  # tool-use counters reach the metrics as batch means of the reward components
        assert {"reward/malformed_calls", "reward/tool_calls", "reward/submitted", "rollout/turns"} <= set(row)
        assert row["rollout/turns"] >= 1


def test_the_bash_block_format_runs_commands_and_submits():
    task = get_family("files").make_tasks("train", 1, seed=7, tool_format="bash_block")[0]
    env = get_family("files").make_env()
    messages = env.reset(task)
    assert "```bash" in messages[0]["content"] and "submit <answer>" in messages[0]["content"]
    found = env.step(f"Let me search.\n```bash\ngrep -r -A1 'name: {task.metadata['device']}' inventory\n```")
    serial = next(part for part in found.messages[0]["content"].split() if part.startswith("SN-"))
    two = env.step("```bash\nls\n```\n```bash\npwd\n```")
    assert not two.done and "one command" in two.messages[0]["content"]
    assert env.step(f"```bash\nsubmit {serial}\n```").reason == "submitted"
    assert env.score().value == 1.0 and env.score().components["malformed_calls"] == 1
    env.close()
