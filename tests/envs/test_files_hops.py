"""files with `hops: 2`: two dependent lookups, exact answers, a stable split, and room in 2048 tokens."""
import json
import random

import pytest

from rlyard.envs import get_family
from rlyard.envs.files.tasks import split_of


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def canonical(task):
    return task.id.split("-", 2)[2]


def test_hops_1_is_the_default_and_unchanged():
    family = get_family("files")
    assert family.make_tasks("train", 30, 4) == family.make_tasks("train", 30, 4, hops=1)
    assert all("teams/" not in "".join(t.payload["files"]) for t in family.make_tasks("train", 30, 4))
    for bad in (0, 3, True, "2"):
        with pytest.raises(ValueError, match="hops"):
            family.make_tasks("train", 1, 0, hops=bad)


def test_one_search_cannot_answer_the_second_lookup_needs_the_first():
    family = get_family("files")
    for task in family.make_tasks("train", 40, 0, hops=2):
        files, answer, device = task.payload["files"], task.payload["answer"], task.metadata["device"]
        holders = [p for p, text in files.items() if answer in text]
        device_file = [p for p, text in files.items() if f"name: {device}\n" in text]
        assert len(holders) == 1 and holders[0].startswith("teams/") and len(device_file) == 1
        assert device not in files[holders[0]]  # the answer's file does not name the device
        assert answer not in files[device_file[0]]  # the device's file does not hold the answer
        team = task.metadata["team"]
        assert f"team: {team}\n" in files[device_file[0]] and holders[0] == f"teams/{team}.txt"
        ids = [line for p, text in files.items() if p.startswith("teams/") for line in text.splitlines() if "EMP-" in line]
        assert len(ids) == len(set(ids)) >= 2  # guessing a team is not enough
        assert answer.startswith("EMP-") and device in task.prompt[0]["content"] and answer not in task.prompt[0]["content"]


def test_through_the_env_a_search_for_the_device_shows_its_team_not_the_answer():
    family = get_family("files")
    task = family.make_tasks("train", 1, 2, hops=2)[0]
    env = family.make_env()
    env.reset(task)
    found = env.step(call("grep", pattern=task.metadata["device"])).messages[0]["content"]
    assert task.payload["answer"] not in found and task.metadata["device"] in found
    shown = env.step(call("bash", command=f"grep -rn -A3 'name: {task.metadata['device']}' inventory")).messages[0]["content"]
    assert f"team: {task.metadata['team']}" in shown and task.payload["answer"] not in shown
    team_file = env.step(call("read_file", path=f"teams/{task.metadata['team']}.txt")).messages[0]["content"]
    assert task.payload["answer"] in team_file
    assert env.step(call("submit", answer=task.payload["answer"])).reason == "submitted"
    assert env.score().value == 1.0
    env.close()


def test_ids_unique_and_the_split_stable_and_disjoint():
    family = get_family("files")
    train = family.make_tasks("train", 300, 1, hops=2)
    evals = family.make_tasks("eval", 60, 1, hops=2)
    assert len({t.id for t in train}) == len(train) and len({t.id for t in evals}) == len(evals)
    assert all(split_of(canonical(t)) == "train" for t in train) and all(split_of(canonical(t)) == "eval" for t in evals)
    assert not {canonical(t) for t in train} & {canonical(t) for t in evals}
    assert family.make_tasks("train", 300, 1, hops=2) == train  # the same seed, the same tasks
    assert {t.id for t in family.make_tasks("train", 50, 2, hops=2)} != {t.id for t in train[:50]}
    assert not {t.id for t in train} & {t.id for t in family.make_tasks("train", 300, 1)}  # hops 1 ids differ


@pytest.mark.parametrize("hops", [1, 2])
def test_an_oracle_episode_fits_the_files_config_budget(tokenizer, hops):
    """configs/files.yaml: agent.max_total_tokens 2048, max_turns 4, max_tokens_per_turn 96."""
    family = get_family("files")
    for task in family.make_tasks("train", 15, 0, hops=hops):
        env = family.make_env()
        messages = env.reset(task)
        replies = family.oracle(task, random.Random(task.id))
        for reply in replies:
            result = env.step(reply)
            messages += [{"role": "assistant", "content": reply}, *result.messages]
        assert env.score().value == 1.0
        env.close()
        assert len(replies) <= 4
        assert max(len(tokenizer(r).input_ids) for r in replies) <= 96
        assert len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)) <= 2048
