"""countdown: solvable held-out tasks, and a verifier that parses safely and never raises."""
import random
import re

import pytest

from rlyard.envs import SingleTurnEnv, family_names, get_family
from rlyard.envs.countdown import evaluate, extract_expression, make_env, make_tasks, verify
from rlyard.envs.countdown.tasks import split_of
from rlyard.envs.countdown.verify import InvalidExpression
from rlyard.types import Reward, Task


def _task(numbers: list[int], target: int) -> Task:
    return Task(id="t", prompt=[], env="countdown", payload={"numbers": numbers, "target": target})


@pytest.mark.parametrize("num_count", [2, 3, 4, 6])
def test_generated_tasks_are_solvable(num_count):
    for split, n in (("train", 400), ("eval", 40)):  # num_count=2 has only ~60 eval problems
        for task in make_tasks(split, n, seed=num_count, num_count=num_count):
            numbers, target = task.payload["numbers"], task.payload["target"]
            assert len(numbers) == num_count and all(1 <= x <= 25 for x in numbers)
            assert 10 <= target <= 100 and target not in numbers
            reward = verify(f"<answer>{task.metadata['solution']}</answer>", task)
            assert reward.value == 1.0, (task, reward.info)
            assert sorted(reward.info["numbers_used"]) == numbers  # the reference uses every number


def test_prompt_shape_and_system_prompt():
    (task,) = make_tasks("train", 1, seed=0)
    (message,) = task.prompt
    assert message["role"] == "user" and "<answer>" in message["content"]
    assert str(task.payload["numbers"]) in message["content"] and str(task.payload["target"]) in message["content"]
    assert task.id == f"countdown-train-{task.metadata['problem']}"
    (task,) = make_tasks("train", 1, seed=0, system_prompt="Think first.")
    assert [m["role"] for m in task.prompt] == ["system", "user"]


@pytest.mark.parametrize(
    "reply",
    [
        "<answer>(24 - 19) * 4</answer>",
        "<think>24-19 is 5, times 4 is 20</think>\n<answer> 4 * (24 - 19) </answer>",
        "<ANSWER>(24 - 19) * 4 = 20</ANSWER>",
        "<answer>$(24 - 19) \u00d7 4$</answer>",
        "<answer>1 + 1</answer> no wait <answer>(24-19)*4</answer>",  # the last tag counts
        "Let me try.\n(24 - 19) * 4 = 20\nDone.",  # no tag: last arithmetic-looking line
        "Answer: (24-19)*4",
        "<answer>-(19 - 24) * 4</answer>",
    ],
)
def test_correct_replies(reply):
    reward = verify(reply, _task([4, 19, 24], 20))
    assert reward.value == 1.0, reward.info
    assert reward.components == {"correct": 1.0, "valid_expression": 1.0, "uses_allowed_numbers": 1.0}


def test_subset_of_numbers_and_exact_division():
    assert verify("<answer>3 * 4</answer>", _task([3, 4, 5], 12)).value == 1.0  # each number *at most* once
    assert verify("<answer>7 / 3 * 3</answer>", _task([3, 3, 7], 7)).value == 1.0  # exact fractions
    assert verify("<answer>7 / 2</answer>", _task([2, 7], 3)).value == 0.0  # 3.5 is not 3


@pytest.mark.parametrize(
    "expression, numbers, target",
    [
        ("4 + 4 + 4", [3, 4, 5], 12),  # 4 reused
        ("7 / 3 * 3", [3, 7], 7),  # 3 reused
        ("6 * 2", [3, 4, 5], 12),  # numbers not given
        ("12", [3, 4, 5], 12),
    ],
)
def test_rejects_numbers_not_given(expression, numbers, target):
    reward = verify(f"<answer>{expression}</answer>", _task(numbers, target))
    assert reward.value == 0.0
    assert reward.components == {"correct": 0.0, "valid_expression": 1.0, "uses_allowed_numbers": 0.0}


@pytest.mark.parametrize(
    "expression",
    [
        "2 ** 3",  # power
        "9 ** 9 ** 9 ** 9",  # must be rejected without being computed
        "16 // 2",
        "abs(-8)",
        "__import__('os').system('echo hi')",
        "x",
        "lambda: 8",
        "(2)(4)",  # a call on a number
        "8.0",
        "1e1 - 2",
        "0x8",
        "[8][0]",
        "8 if 1 else 2",
        "8 % 9",
        "2 +",
        "8 / (2 - 2)",
        "25 * 25 * 25 * 25 * 25 * 25 * 25 * 25 * 25 * 25 * 25 * 25",  # beyond the magnitude guard
        "(" * 150 + "8" + ")" * 150,
        "1" * 400,
    ],
)
def test_rejects_disallowed_expressions(expression):
    with pytest.raises(InvalidExpression):
        evaluate(expression)
    reward = verify(f"<answer>{expression}</answer>", _task([2, 3, 8, 9], 8))
    assert reward.value == 0.0 and reward.components["valid_expression"] == 0.0
    assert reward.info["error"]


def test_no_expression_found():
    for reply in ["", "I give up.", "<answer></answer>", "The target is hard"]:
        reward = verify(reply, _task([1, 2], 3))
        assert reward.value == 0.0 and reward.components["valid_expression"] == 0.0
    assert extract_expression("no maths here") is None


def test_verifier_never_raises_on_garbage():
    nasty = [
        "\x00", "<answer>\x00</answer>", "<answer>", "</answer>", "<answer>" * 1000, "-" * 10_000 + "1",
        "<answer>" + "-" * 250 + "1</answer>", "<answer>" + "(" * 199 + "1" + ")" * 199 + "</answer>",
        "9" * 100_000, "<answer>" + "9" * 5000 + "</answer>", "\ud800", "<answer>\ud800</answer>",
        "<answer>().__class__.__bases__[0]</answer>", "<answer>1_0</answer>", "<answer>True</answer>",
        "<answer>07 + 1</answer>", "<answer>1/0</answer>", "1\n2\n3 +\n", "=\n==\n= 3",
    ]
    rng = random.Random(0)
    alphabet = "0123456789+-*/().= \n<>answer/\u00d7\u00f7\u2212x_'\"[]{}\x00**"
    fuzz = ["".join(rng.choices(alphabet, k=rng.randint(0, 60))) for _ in range(3000)]
    tags = [f"<answer>{s}</answer>" for s in fuzz[:1000]]
    for reply in nasty + fuzz + tags:
        reward = verify(reply, _task([1, 2, 3], 6))
        assert isinstance(reward, Reward) and reward.value in (0.0, 1.0)


def test_deterministic():
    assert make_tasks("train", 50, seed=5) == make_tasks("train", 50, seed=5)
    assert make_tasks("eval", 30, seed=5, num_count=4) == make_tasks("eval", 30, seed=5, num_count=4)
    assert make_tasks("train", 50, seed=5) != make_tasks("train", 50, seed=6)
    assert make_tasks("eval", 60, seed=1)[:20] == make_tasks("eval", 20, seed=1)


def test_eval_is_held_out():
    train, evals = set(), set()
    for seed in (0, 1):
        train |= {t.metadata["problem"] for t in make_tasks("train", 3000, seed=seed)}
        eval_tasks = make_tasks("eval", 500, seed=seed)
        assert len({t.id for t in eval_tasks}) == 500  # eval problems are distinct
        evals |= {t.metadata["problem"] for t in eval_tasks}
    assert train and evals and not train & evals
    assert all(split_of(p) == "eval" for p in evals) and all(split_of(p) == "train" for p in train)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"split": "validation"}, "allowed: ['train', 'eval']"),
        ({"ops": "+"}, "['max_number', 'max_target', 'min_number', 'min_target', 'num_count', 'system_prompt']"),
        ({"num_count": 1}, "num_count"),
        ({"num_count": 7}, "num_count"),
        ({"min_number": 0}, "min_number"),
        ({"min_number": 30, "max_number": 20}, "max_number"),
        ({"min_target": 50, "max_target": 20}, "max_target"),
        ({"max_number": "25"}, "max_number"),
        ({"system_prompt": 3}, "system_prompt"),
    ],
)
def test_bad_options_raise(kwargs, message):
    args = {"split": "train", "n": 3, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        make_tasks(**args)


def test_infeasible_options_raise():
    with pytest.raises(ValueError, match="found only"):
        make_tasks("train", 5, seed=0, num_count=2, max_number=2, min_target=50)


def test_registered_family_and_env():
    assert "countdown" in family_names()
    family = get_family("countdown")
    tasks = family.make_tasks("eval", 5, seed=0)
    assert len(tasks) == 5 and family.verify is verify
    env = family.make_env()
    assert isinstance(env, SingleTurnEnv) and isinstance(make_env(), SingleTurnEnv)
    assert env.reset(tasks[0]) == tasks[0].prompt
    assert env.step(f"<answer>{tasks[0].metadata['solution']}</answer>").done
    assert env.score().value == 1.0
