"""Python reward functions (`env.reward`): loading, TRL's calling convention, and every way a
function can fail, each giving a clear error or an infra-flagged sample, never a silent 0."""
import asyncio

import pytest

from rlyard.config import ConfigError, load_config
from rlyard.rewards import (RewardLoadError, boxed_format, exact_match, json_schema, json_valid, load_rewards, math_equal,
                            regex_match, score_samples, think_format)
from rlyard.types import Task


def chat_task(i: int, **payload) -> Task:
    return Task(id=f"t{i}", prompt=[{"role": "user", "content": f"q{i}"}], env="dataset", payload=payload,
                metadata={"prompt_format": "conversational"})


def text_task(i: int, **payload) -> Task:
    return Task(id=f"t{i}", prompt=[{"role": "user", "content": f"q{i}"}], env="dataset", payload=payload,
                metadata={"prompt_format": "standard", "prompt_text": f"q{i}"})


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(
        "calls = []\n"
        "def half(completions, **kwargs):\n    calls.append(len(completions))\n    return [0.5] * len(completions)\n"
        "def quarter(completions, answer):\n    return [0.25 if a else None for a in answer]\n"
        "def boom(completions, answer, **kwargs):\n"
        "    if any(a == 'bad' for a in answer):\n        raise ZeroDivisionError('bad row')\n"
        "    return [1.0] * len(completions)\n"
        "def short(completions, **kwargs):\n    return [1.0]\n"
        "def nan(completions, **kwargs):\n    return [float('nan')] + [1.0] * (len(completions) - 1)\n"
        "def word(completions, **kwargs):\n    return ['yes'] * len(completions)\n"
        "def nothing(completions, **kwargs):\n    return [None] * len(completions)\n"
        "async def slow_one(completions, **kwargs):\n"
        "    import asyncio\n    await asyncio.sleep(0.01)\n    return [1.0] * len(completions)\n"
        "def no_completions(prompts):\n    return [1.0]\n"
        "NOT_A_FUNCTION = 3\n"
    )
    return path


def test_loads_from_a_file_and_from_a_module(reward_file):
    functions = load_rewards([f"{reward_file}:half", "rlyard.rewards:exact_match"], [2.0, 1.0])
    assert [(f.name, f.weight) for f in functions] == [("half", 2.0), ("exact_match", 1.0)]
    assert functions[0].accepts_any and not load_rewards(f"{reward_file}:quarter")[0].accepts_any


@pytest.mark.parametrize("spec, expected", [
    ("no_such_module_xyz:fn", "cannot import 'no_such_module_xyz'"),
    ("missing/file.py:fn", "no file"),
    ("rlyard.rewards:no_such_fn", "has no attribute 'no_such_fn'"),
    ("exact_match", "expected 'package.module:function'"),
])
def test_unusable_specs_are_clear_errors(spec, expected):
    with pytest.raises(RewardLoadError, match=expected):
        load_rewards(spec)


def test_file_errors_name_the_attribute(reward_file):
    with pytest.raises(RewardLoadError, match="NOT_A_FUNCTION is a int"):
        load_rewards(f"{reward_file}:NOT_A_FUNCTION")
    with pytest.raises(RewardLoadError, match="takes `completions`"):
        load_rewards(f"{reward_file}:no_completions")
    broken = reward_file.parent / "broken.py"
    broken.write_text("import no_such_dependency_xyz\n")
    with pytest.raises(RewardLoadError, match="failed on import"):
        load_rewards(f"{broken}:fn")


@pytest.mark.parametrize("overrides, expected", [
    (["env.name=dataset", "env.options.path=x.jsonl"], "env.reward: env.name=dataset has no grader of its own"),
    (["env.name=arith", "env.reward=no_such_module_xyz:fn"], "env.reward: cannot import 'no_such_module_xyz'"),
    (["env.name=files", "env.reward=rlyard.rewards:exact_match"], "grade single-turn families"),
    (["env.name=arith", "env.reward=rlyard.rewards:exact_match", "env.reward_weights=[1,2]"], "one weight per env.reward"),
])
def test_config_refuses_bad_rewards_before_any_model_loads(overrides, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(None, overrides)


def test_weighted_sum_and_components_by_hand(reward_file):
    functions = load_rewards([f"{reward_file}:half", f"{reward_file}:quarter"], [2.0, 4.0])
    tasks = [chat_task(0, answer="x"), chat_task(1, answer="")]
    rewards = score_samples(functions, tasks, ["a", "b"], [[1], [2]])
    # sample 0: 2 * 0.5 + 4 * 0.25 = 2.0; sample 1: quarter says None (not applicable), so 2 * 0.5 = 1.0
    assert [r.value for r in rewards] == [2.0, 1.0]
    assert rewards[0].components == {"half": 0.5, "quarter": 0.25} and rewards[1].components == {"half": 0.5}
    assert not any(r.infra_error for r in rewards)


def test_one_batched_call_per_function(reward_file):
    functions = load_rewards(f"{reward_file}:half")
    module_calls = functions[0].fn.__globals__["calls"]
    score_samples(functions, [chat_task(i) for i in range(6)], ["x"] * 6, [[1]] * 6)
    assert module_calls[-1] == 6


def test_a_raise_fails_only_the_samples_it_raises_on(reward_file):
    functions = load_rewards(f"{reward_file}:boom")
    tasks = [chat_task(0, answer="ok"), chat_task(1, answer="bad"), chat_task(2, answer="ok")]
    rewards = score_samples(functions, tasks, ["x"] * 3, [[1]] * 3)
    assert [r.infra_error for r in rewards] == [False, True, False]
    assert [r.value for r in rewards if not r.infra_error] == [1.0, 1.0]
    assert "ZeroDivisionError: bad row" in rewards[1].info["error"]


@pytest.mark.parametrize("name, flagged, message", [
    ("short", [True, True, True], "returned 1 values for 3 samples"),
    ("nan", [True, False, False], "(not finite)"),
    ("word", [True, True, True], "'yes' (str), not a float or None"),
    ("nothing", [True, True, True], "every reward function returned None"),
])
def test_bad_outputs_are_flagged_infra_never_zero(reward_file, name, flagged, message):
    rewards = score_samples(load_rewards(f"{reward_file}:{name}"), [chat_task(i) for i in range(3)], ["x"] * 3, [[1]] * 3)
    assert [r.infra_error for r in rewards] == flagged
    assert message in rewards[0].info["error"]


def test_async_functions_run_concurrently_with_sync_ones(reward_file):
    functions = load_rewards([f"{reward_file}:slow_one", f"{reward_file}:half"])
    assert functions[0].is_async
    rewards = score_samples(functions, [chat_task(i) for i in range(2)], ["x", "y"], [[1], [2]])
    assert [r.value for r in rewards] == [1.5, 1.5]


def test_works_inside_a_running_event_loop_free_thread(reward_file):
    """Rollout threads (orchestrate.mode=async) have no event loop: asyncio.run is safe there."""
    import threading

    out = []
    thread = threading.Thread(target=lambda: out.append(score_samples(
        load_rewards(f"{reward_file}:slow_one"), [chat_task(0)], ["x"], [[1]])))
    thread.start()
    thread.join()
    assert out[0][0].value == 1.0 and not asyncio.iscoroutine(out[0][0].value)


def test_trl_formats_standard_and_conversational():
    seen = {}

    def spy(prompts, completions, completion_ids, answer, **kwargs):
        seen.update(prompts=prompts, completions=completions, ids=completion_ids, answer=answer)
        return [1.0] * len(completions)

    from rlyard.rewards.loading import describe
    score_samples([describe(spy, "spy", 1.0)], [text_task(0, answer="7"), chat_task(1, answer="8")], ["a", "b"], [[5], [6]])
    assert seen["prompts"] == ["q0", [{"role": "user", "content": "q1"}]]
    assert seen["completions"] == ["a", [{"role": "assistant", "content": "b"}]]
    assert seen["ids"] == [[5], [6]] and seen["answer"] == ["7", "8"]


def test_trl_reward_functions_unchanged():
    """TRL's own functions, imported from the trl package as they are."""
    from trl.rewards import accuracy_reward, think_format_reward

    from rlyard.rewards.loading import describe
    functions = [describe(accuracy_reward, "trl.rewards:accuracy_reward", 1.0),
                 describe(think_format_reward, "trl.rewards:think_format_reward", 0.5)]
    tasks = [chat_task(0, solution="$\\frac{1}{2}$"), chat_task(1, solution="$3$")]
    texts = ["<think>\nhalf\n</think>\nThe answer is $\\boxed{\\frac{1}{2}}$", "The answer is $\\boxed{4}$"]
    rewards = score_samples(functions, tasks, texts, [[1], [2]])
    assert [r.value for r in rewards] == [1.5, 0.0]
    assert rewards[0].components == {"accuracy_reward": 1.0, "think_format_reward": 1.0}
    assert "gold_parsed" in rewards[0].info["extra"]  # accuracy_reward's log_extra columns are kept


def test_builtin_helpers_by_hand():
    replies = ["The answer is\n42", "I think \\boxed{\\frac{1}{2}}", "```json\n{\"a\": 1}\n```", "<think>\nok\n</think>\nyes"]
    assert exact_match(replies, ["42", "1/2", None, "YES"]) == [1.0, 0.0, None, 1.0]
    assert regex_match(replies, [r"\b42\b", r"\\boxed", "nope", None]) == [1.0, 1.0, 0.0, None]
    assert math_equal(replies, ["42", "0.5", "2", None]) == [1.0, 1.0, 0.0, None]
    assert math_equal(replies) == [None] * 4
    assert json_valid(replies) == [0.0, 0.0, 1.0, 0.0]
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}
    assert json_schema(replies, [schema, None, schema, '{"type": "string"}']) == [0.0, None, 1.0, 0.0]
    assert think_format(replies) == [0.0, 0.0, 0.0, 1.0]
    assert boxed_format(replies) == [0.0, 1.0, 0.0, 0.0]
    assert exact_match([[{"role": "assistant", "content": "42"}]], ["42"]) == [1.0]  # TRL's conversational format


def without_math_verify(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "math_verify" else real(name, *a))


def test_math_equal_without_math_verify_reads_exact_values(monkeypatch):
    without_math_verify(monkeypatch)
    replies = ["so 2*3 = \\boxed{6}", "it is 0.50", "\\boxed{\\frac{3}{4}}", "1,000 apples", "\\boxed{2^{10}}", "no number"]
    assert math_equal(replies, ["6", "1/2", "0.75", "1000", "1024", "3"]) == [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]


# --------------------------------------------------------------- attacks a policy would try on math_equal
INJECTION = "\\boxed{__import__('os').system('touch {mark}')}"


@pytest.mark.parametrize("checker", ["math_verify", "exact"])
def test_a_reply_never_runs_as_code(monkeypatch, tmp_path, checker):
    if checker == "exact":
        without_math_verify(monkeypatch)
    mark = tmp_path / "pwned"
    reply = INJECTION.replace("{mark}", str(mark))
    assert math_equal([reply, f"{reply} so \\boxed{{0}}"], ["0", "1"]) == [0.0, 0.0]
    assert not mark.exists()


@pytest.mark.timeout(120)
def test_a_power_tower_cannot_stall_the_trainer():
    """sympy computes 9^(9^(9^9)) in C holding the GIL: in-process timeouts never fire. The check
    runs in a child process that is killed at its deadline; the reply scores 0, the next check works."""
    import threading

    from rlyard.rewards.builtin import _MATH_VERIFY

    out = []
    worker = threading.Thread(target=lambda: out.append(math_equal(["\\boxed{9^{9^{9^{9}}}}", "\\boxed{29}"], ["29", "29"])))
    worker.start()
    worker.join(60)
    assert not worker.is_alive() and out == [[0.0, 1.0]]
    assert _MATH_VERIFY._child is not None and _MATH_VERIFY._child.poll() is None  # a fresh child took the next check


def test_a_power_tower_without_math_verify_is_not_a_number(monkeypatch):
    without_math_verify(monkeypatch)
    assert math_equal(["\\boxed{9^{9^{9^{9}}}}", "\\boxed{10^{100}}"], ["29", "1"]) == [0.0, 0.0]


def test_what_the_isolated_function_prints_is_never_read_as_its_answer(tmp_path, monkeypatch):
    """The child's answers are lines on its stdout pipe: a graded function (or a library it calls)
    that prints, through Python or straight to fd 1, a fake answer line included, must neither be
    read as an answer nor shift the next call's answer by a line (both happened before)."""
    from rlyard.rewards.isolated import IsolatedFunction

    (tmp_path / "noisy_grader.py").write_text(
        "import os\nprint('noise at import')\n"
        "def double(x):\n"
        "    print('noise', x)\n"
        "    print('{\"result\": 999}', flush=True)\n"
        "    os.write(1, b'{\"result\": 998}\\n')\n"
        "    return 2 * x\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    double = IsolatedFunction("noisy_grader:double", timeout_s=30)
    try:
        assert [double(x) for x in range(4)] == [0, 2, 4, 6]
    finally:
        double.close()
