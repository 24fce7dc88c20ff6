"""arith: task generation (deterministic, held out, validated options) and the last-number verifier."""
import random
import re

import pytest

from rlyard.envs import SingleTurnEnv, family_names, get_family
from rlyard.envs.arith import make_env, make_tasks, verify
from rlyard.envs.arith.tasks import solve, split_of
from rlyard.types import Reward, Task


def _task(answer: int) -> Task:
    return Task(id="t", prompt=[{"role": "user", "content": "?"}], env="arith", payload={"answer": answer})


@pytest.mark.parametrize(
    "reply, answer",
    [
        ("19", 19),
        ("= 19.", 19),
        ("**19**", 19),
        ("The answer is 19.", 19),
        ("$19$", 19),
        ("\\boxed{19}", 19),
        ("19\n", 19),
        ("x + y = 19", 19),
        ("10 + 9 = 19", 19),
        ("Let me add: 10 + 9.\nSo the result is **19**.", 19),
        ("\\boxed{19}. Check: 10 + 9 = 19, and 9 + 10 too", 19),  # a boxed answer beats later text
        ("19.0", 19),
        ("1,234", 1234),
        ("The sum is 1,234.", 1234),
        ("-5", -5),
        ("37 - 42 = -5", -5),
        ("The answer is $-5$.", -5),
        ("\u22125", -5),  # unicode minus sign
        ("12*34 = 408", 408),
    ],
)
def test_formatting_variants_are_correct(reply, answer):
    reward = verify(reply, _task(answer))
    assert reward.value == 1.0, (reply, reward.info)
    assert reward.components == {"correct": 1.0, "has_answer": 1.0}
    assert reward.info["expected"] == answer


@pytest.mark.parametrize(
    "reply, answer",
    [
        ("18", 19),
        ("19 = 10 + 9", 19),  # the last number is 9
        ("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", 19),  # listing numbers is not an answer
        ("19.5", 19),
        ("191", 19),
        ("\\boxed{18}, though maybe 19", 19),
        ("37-42", -5),  # "-42" here is a binary minus, so the answer read is 42
        ("5", -5),
        ("1,234", 1),
    ],
)
def test_wrong_answers_get_zero(reply, answer):
    reward = verify(reply, _task(answer))
    assert reward.value == 0.0, (reply, reward.info)
    assert reward.components["has_answer"] == 1.0


@pytest.mark.parametrize("reply", ["", "I don't know.", "nineteen", "\n\n", "$$"])
def test_no_number_means_no_answer(reply):
    reward = verify(reply, _task(19))
    assert reward.value == 0.0
    assert reward.components == {"correct": 0.0, "has_answer": 0.0}
    assert reward.info["extracted"] is None


def test_listing_numbers_only_counts_the_last():
    task = _task(19)
    assert verify(" ".join(map(str, range(100))), task).value == 0.0
    assert verify(" ".join(map(str, range(100))) + " 19", task).value == 1.0


def test_verifier_never_raises_on_garbage():
    rng = random.Random(0)
    alphabet = "0123456789-+*=.,$\\{}boxed \n\u2212\x00\ud800"
    nasty = ["9" * 10_000, "-" * 5000 + "1", "1," * 5000, "1." * 5000, "\\boxed{" * 1000, "\\boxed{}"]
    for reply in nasty + ["".join(rng.choices(alphabet, k=rng.randint(0, 80))) for _ in range(2000)]:
        reward = verify(reply, _task(19))
        assert isinstance(reward, Reward) and reward.value in (0.0, 1.0)


def test_quickstart_prompt_shape():
    for task in make_tasks("train", 200, seed=0):
        (message,) = task.prompt
        assert message["role"] == "user"
        x, y = map(int, re.fullmatch(r"What is (\d+)\+(\d+)\?", message["content"]).groups())
        assert 10 <= x <= 99 and 10 <= y <= 99
        assert task.payload == {"answer": x + y}
        assert task.env == "arith" and task.id == f"arith-train-{x}+{y}"


def test_system_prompt_and_template_options():
    (task,) = make_tasks("eval", 1, seed=3, system_prompt="Be brief.", template="Compute {x} {op} {y}.")
    assert task.prompt[0] == {"role": "system", "content": "Be brief."}
    assert task.prompt[1]["role"] == "user" and task.prompt[1]["content"].startswith("Compute ")


def test_all_operators_have_correct_answers():
    tasks = make_tasks("train", 500, seed=1, ops="+-*", min_value=-20, max_value=20)
    assert {t.metadata["op"] for t in tasks} == {"+", "-", "*"}
    for task in tasks:
        x, op, y = re.fullmatch(r"(-?\d+)([+\-*])\(?(-?\d+)\)?", task.metadata["problem"]).groups()
        assert task.payload["answer"] == solve(int(x), op, int(y)) == eval(task.metadata["problem"])
        assert verify(f"The answer is {task.payload['answer']}.", task).value == 1.0


def test_deterministic():
    assert make_tasks("train", 50, seed=7) == make_tasks("train", 50, seed=7)
    assert make_tasks("eval", 50, seed=7, ops="+*") == make_tasks("eval", 50, seed=7, ops="+*")
    assert make_tasks("train", 50, seed=7) != make_tasks("train", 50, seed=8)
    assert make_tasks("eval", 100, seed=2)[:10] == make_tasks("eval", 10, seed=2)  # longer extends shorter


def test_eval_is_held_out():
    train, evals = set(), set()
    for seed in (0, 1):
        train |= {t.metadata["problem"] for t in make_tasks("train", 3000, seed=seed)}
        eval_tasks = make_tasks("eval", 700, seed=seed)  # ~810 eval problems exist for 10..99 "+"
        assert len({t.id for t in eval_tasks}) == 700  # eval problems are distinct
        evals |= {t.metadata["problem"] for t in eval_tasks}
    assert train and evals and not train & evals
    assert all(split_of(p) == "eval" for p in evals) and all(split_of(p) == "train" for p in train)
    everything = [f"{x}+{y}" for x in range(10, 100) for y in range(10, 100)]
    assert 0.07 < sum(split_of(p) == "eval" for p in everything) / len(everything) < 0.13


def test_train_repeats_share_an_id():
    tasks = make_tasks("train", 2000, seed=0, max_value=20)
    by_problem = {}
    for task in tasks:
        assert by_problem.setdefault(task.metadata["problem"], task) == task
    assert len(by_problem) < len(tasks)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"split": "test"}, "allowed: ['train', 'eval']"),
        ({"colour": "red"}, "allowed: ['max_value', 'min_value', 'ops', 'system_prompt', 'template']"),
        ({"ops": "/"}, "ops"),
        ({"ops": ""}, "ops"),
        ({"min_value": 50, "max_value": 10}, "min_value"),
        ({"max_value": 9.5}, "max_value"),
        ({"template": "What is {x}?"}, "template"),
        ({"template": "{x}{op}{y}{z}"}, "template"),
        ({"n": -1}, "n must be"),
    ],
)
def test_bad_options_raise(kwargs, message):
    args = {"split": "train", "n": 3, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        make_tasks(**args)


def test_too_many_eval_problems_raises():
    with pytest.raises(ValueError, match="distinct eval problems"):
        make_tasks("eval", 50, seed=0, min_value=1, max_value=9)  # 81 problems, ~8 of them eval


def test_registered_family_and_env():
    assert "arith" in family_names()
    family = get_family("arith")
    tasks = family.make_tasks("eval", 5, seed=0)
    assert len(tasks) == 5 and family.verify is verify
    env = family.make_env()
    assert isinstance(env, SingleTurnEnv) and isinstance(make_env(), SingleTurnEnv)
    assert env.reset(tasks[0]) == tasks[0].prompt
    assert env.step(f"It is {tasks[0].payload['answer']}.").done
    assert env.score().value == 1.0
    env.close()
