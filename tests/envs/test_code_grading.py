"""The `code` grader against adversarial agents, on a tiny repository built in the test.

Every attack goes through the environment's own tools in the real sandbox, like a policy's
tool calls would; each must score 0 (or be refused), and an honest fix must score 1.
"""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from rlyard.envs.code.env import CodeEnv, choose_arm
from rlyard.envs.code.repo import make_patch
from rlyard.envs.code.tasks import DEFAULTS, builtin_records
from rlyard.types import Task

CLEAN = "def add(a, b):\n    return a + b\n\n\ndef clamp(x, low, high):\n    return max(low, min(x, high))\n"
BUGGY = CLEAN.replace("min(x, high)", "min(x, high - 1)")
HIDDEN = "from mini import clamp\n\n\ndef test_clamp_upper():\n    assert clamp(10, 0, 5) == 5\n\n\ndef test_clamp_inside():\n    assert clamp(3, 0, 5) == 3\n"
HIDDEN_FILE = "tests/test_issue_mini_1.py"


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    root = tmp_path_factory.mktemp("builtin")
    write(root / "mini" / "repo", {"mini/__init__.py": CLEAN, "tests/test_basic.py": "from mini import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"})
    write(root / "mini" / "tasks" / "mini-1", {"bug.patch": make_patch({"mini/__init__.py": CLEAN}, {"mini/__init__.py": BUGGY}),
                                               HIDDEN_FILE: HIDDEN,
                                               "task.yaml": "problem_statement: clamp(10, 0, 5) returns 4, not 5.\ndifficulty: easy\ntimeout_s: 30\n"})
    [record] = builtin_records(root)
    return record


def make_task(record, arm="edit", guard=True):
    settings = {k: DEFAULTS[k] for k in ("arms", "tool_format", "timeout_is_infra")}
    payload = {**record, **settings, "arm_weights": {arm: 1.0}, "guard": guard, "seed": 0}
    return Task(id=record["instance_id"], prompt=[], env="code", payload=payload, metadata={"round": "0/"})


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def play(task, *replies):
    """Run the replies as an agent's turns; return (tool outputs, reward)."""
    env = CodeEnv()
    try:
        env.reset(task)
        outputs = []
        for reply in replies:
            result = env.step(reply)
            outputs += [m["content"] for m in result.messages]
            if result.done:
                break
        return outputs, env.score()
    finally:
        env.close()


HONEST_FIX = call("edit_file", path="mini/__init__.py", old_text="min(x, high - 1)", new_text="min(x, high)")


def test_the_workspace_holds_the_base_and_no_hidden_test(record):
    env = CodeEnv()
    try:
        messages = env.reset(make_task(record, "bash", guard=False))
        assert "clamp(10, 0, 5)" in messages[1]["content"] and "tests/test_basic.py" in messages[1]["content"]
        assert not (env.workspace / HIDDEN_FILE).exists() and not (env.workspace / ".rlyard").exists()
        assert (env.workspace / "mini/__init__.py").read_text() == BUGGY
        log = env.step(call("bash", command="git log --all --oneline | wc -l; git status --short | wc -l")).messages[0]["content"]
        assert log.split()[1:3] == ["1", "0"]  # one commit, nothing modified
    finally:
        env.close()


def test_an_honest_fix_scores_1_and_no_fix_scores_0(record):
    _, reward = play(make_task(record), HONEST_FIX, call("submit", answer="fixed clamp"))
    assert reward.value == 1.0 and reward.components["submitted"] == 1.0 and reward.components["testbed_corrupted"] == 0.0
    _, reward = play(make_task(record), call("submit", answer="nothing"))
    assert reward.value == 0.0 and not reward.infra_error and "test_clamp_upper" in reward.info["output"]


@pytest.mark.parametrize("attack", [
    # the agent writes its own "hidden" test file and weakens the visible one
    [call("write_file", path=HIDDEN_FILE, content="def test_clamp_upper():\n    pass\n"),
     call("write_file", path="tests/test_basic.py", content="")],
    # deletes the tests
    [call("bash", command="rm -rf tests .rlyard")],
    # replaces the test folder with a symlink and a file where the runner goes
    [call("bash", command="rm -rf tests && ln -s /tmp tests && echo 'exit 0' > .rlyard")],
])
def test_editing_or_deleting_tests_does_not_pay(record, attack):
    _, reward = play(make_task(record, "edit" if "write_file" in attack[0] else "bash"), *attack, call("submit", answer="done"))
    assert reward.value == 0.0 and not reward.infra_error


SKIP_EVERYTHING = "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n    for item in items:\n        item.add_marker(pytest.mark.skip('no'))\n"


@pytest.mark.parametrize("files", [
    {"conftest.py": SKIP_EVERYTHING, "tests/conftest.py": SKIP_EVERYTHING},
    {"pytest.ini": "[pytest]\naddopts = -k nothing_matches\n", "setup.cfg": "[tool:pytest]\naddopts = --co\n"},
    {"pytest.py": "import sys\nsys.exit(0)\n", "json.py": "raise SystemExit(0)\n", "sitecustomize.py": "import os\nos._exit(0)\n"},
    {"mini/__init__.py": "import os\nos._exit(0)\n"},  # the code under test ends the process "successfully"
    {"mini/__init__.py": "import pytest\npytest.skip('later', allow_module_level=True)\n"},
])
def test_rigging_pytest_does_not_pay(record, files):
    replies = [call("write_file", path=path, content=text) for path, text in files.items()]
    _, reward = play(make_task(record), *replies, call("submit", answer="done"))
    assert reward.value == 0.0 and not reward.infra_error
    # conftest files are reset at grading and shadowing modules have no effect, so next to an honest fix
    # they do not break grading; the project's own pytest configuration is honoured, so a rigged one does
    if "pytest.ini" not in files and "mini/__init__.py" not in files:
        _, reward = play(make_task(record), *replies, HONEST_FIX, call("submit", answer="done"))
        assert reward.value == 1.0


def test_the_guard_refuses_hidden_tests_git_history_and_url_installs(record):
    outputs, reward = play(make_task(record, "bash"),
                           call("bash", command=f"cat {HIDDEN_FILE}"),
                           call("bash", command="git log -p --all"),
                           call("bash", command="git show HEAD~1:mini/__init__.py"),
                           call("bash", command="pip install git+https://example.com/fix.git"),
                           call("bash", command="ls"))
    assert [o.startswith("[bash]\nPermission denied") for o in outputs] == [True, True, True, True, False]
    assert reward.components["guard_blocks"] == 4.0 and reward.value == 0.0


def test_without_the_guard_there_is_nothing_to_find(record):
    outputs, _ = play(make_task(record, "bash", guard=False),
                      call("bash", command=f"cat {HIDDEN_FILE}"), call("bash", command="git log -p --all; git fsck --lost-found"))
    assert "No such file" in outputs[0]
    assert "min(x, high))" not in outputs[1] and outputs[1].count("commit ") == 1  # history is the base commit only


def test_an_unwritable_test_path_is_testbed_corrupted(record):
    _, reward = play(make_task(record, "bash"), call("bash", command="chmod 555 tests"), call("submit", answer="x"))
    assert reward.value == 0.0 and reward.components["testbed_corrupted"] == 1.0 and reward.info["error"] == "testbed_corrupted"


def test_a_test_command_that_hangs_is_an_infra_failure_or_zero_by_option(record):
    hanging = {**record, "test_command": "sleep 30", "timeout_s": 1.0}
    _, reward = play(make_task(hanging), call("submit", answer="x"))
    assert reward.infra_error and reward.components["verifier_timeout"] == 1.0
    task = make_task(hanging)
    _, reward = play(replace(task, payload={**task.payload, "timeout_is_infra": False}), call("submit", answer="x"))
    assert not reward.infra_error and reward.value == 0.0


def test_arms_are_drawn_per_group_by_weight(record):
    payload = {**make_task(record).payload, "arm_weights": {"bash": 1.0, "edit": 3.0}}
    draws = [choose_arm(payload, f"{step}/", "mini-1") for step in range(2000)]
    assert draws == [choose_arm(payload, f"{step}/", "mini-1") for step in range(2000)]  # stable
    assert 0.70 < draws.count("edit") / len(draws) < 0.80
    assert choose_arm({**payload, "seed": 1}, "0/", "mini-1") in ("bash", "edit")


def test_each_arm_has_only_its_tools(record):
    outputs, _ = play(make_task(record, "edit"), call("bash", command="ls"))
    assert "unknown tool 'bash'" in outputs[0]
    outputs, _ = play(make_task(record, "bash"), call("read_file", path="mini/__init__.py"))
    assert "unknown tool 'read_file'" in outputs[0]


# ----- the runner itself attacked from inside the code under test (it runs in pytest's process)

RUNTEST_NOOP = BUGGY + "\nimport _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"
SWALLOW_FAILURES = BUGGY + """
import _pytest.python
_real_runtest = _pytest.python.Function.runtest
def _forgiving(self):
    try:
        _real_runtest(self)
    except AssertionError:
        pass
_pytest.python.Function.runtest = _forgiving
"""
# Forge a report on every pipe the process holds (the old runner named its fd in sys.argv), then leave.
FORGED_REPORT = BUGGY + """
import json, os, stat, sys
hidden = "tests/test_issue_" + "mini_1.py"  # spelled so that the guard does not see the hidden file's name
ids = [hidden + "::test_clamp_upper", hidden + "::test_clamp_inside", "tests/test_basic.py::test_add"]
forged = json.dumps({"exit": 0, "token": "", "outcomes": {i: "passed" for i in ids}})
for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    try:
        if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, forged.encode())
    except OSError:
        pass
print("RLYARD-VERDICT 0 " + json.dumps({"passed": True}))
sys.stdout.flush()
os._exit(0)
"""
# Rewrite the report on its way out: every outcome becomes "passed".
PATCH_JSON = BUGGY + """
import json
_real_dumps = json.dumps
def _dumps(obj, *args, **kwargs):
    if isinstance(obj, dict) and isinstance(obj.get("outcomes"), dict):
        obj = {**obj, "exit": 0, "outcomes": {k: "passed" for k in obj["outcomes"]}}
    return _real_dumps(obj, *args, **kwargs)
json.dumps = _dumps
"""
XFAIL_EVERYTHING = "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n    for item in items:\n        item.add_marker(pytest.mark.xfail(reason='later'))\n"
KILL_THE_RUNNER = BUGGY + "\nimport os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
# Look for the host's token where a same-uid process could read it; the findings surface as a collection error.
READ_THE_RUNNER = BUGGY + """
import os
ppid, found = os.getppid(), []
for what in ("environ", "fd/0", "fd/1", "mem", "maps"):
    try:
        with open(f"/proc/{ppid}/{what}", "rb") as f:
            found.append(f"LEAK {what} {f.read(100)!r}")
    except OSError as e:
        found.append(f"DENIED {what} {e.errno}")
raise RuntimeError("FINDINGS " + "; ".join(found))
"""


@pytest.mark.parametrize("name, text", [
    ("runtest_noop", RUNTEST_NOOP), ("swallow_failures", SWALLOW_FAILURES), ("forged_report", FORGED_REPORT),
    ("patch_json", PATCH_JSON), ("kill_the_runner", KILL_THE_RUNNER), ("read_the_runner", READ_THE_RUNNER),
])
def test_rigging_the_runner_from_the_code_under_test_does_not_pay(record, name, text, monkeypatch):
    if name == "read_the_runner":  # the static screen would stop it first ("/proc/"); here the run-time denials are checked
        monkeypatch.setattr("rlyard.envs.code.verify.screen_workspace", lambda *args, **kwargs: [])
    _, reward = play(make_task(record), call("write_file", path="mini/__init__.py", content=text), call("submit", answer="done"))
    assert reward.value == 0.0 and not reward.infra_error, reward.info
    if name in ("runtest_noop", "swallow_failures", "forged_report"):  # positive evidence of a rigged runner
        assert reward.components["reward_hack"] == 1.0, reward.info
    if name == "read_the_runner":
        findings = next(line for line in reward.info["output"].splitlines() if "RuntimeError: FINDINGS" in line)
        assert "LEAK" not in findings and findings.count("DENIED") == 5, findings


def test_an_xfail_plugin_named_in_the_project_config_is_caught(record):
    rig = [call("write_file", path="rigplugin.py", content=XFAIL_EVERYTHING),
           call("write_file", path="pyproject.toml", content='[tool.pytest.ini_options]\naddopts = "-p rigplugin"\n')]
    _, reward = play(make_task(record), *rig, call("submit", answer="d"))
    assert reward.value == 0.0 and reward.components["reward_hack"] == 1.0, reward.info


def test_conftest_files_above_the_tests_are_reset_before_grading(record):
    assert record["graded_files"]["conftest.py"] is None and record["graded_files"]["tests/conftest.py"] is None
    # a fixture or hook planted next to the tests never reaches them: with the fix it scores 1, without 0
    planted = call("write_file", path="tests/conftest.py", content=XFAIL_EVERYTHING)
    _, reward = play(make_task(record), planted, call("submit", answer="d"))
    assert reward.value == 0.0 and reward.components["reward_hack"] == 0.0
    _, reward = play(make_task(record), planted, HONEST_FIX, call("submit", answer="d"))
    assert reward.value == 1.0


def test_the_grader_checks_the_exact_hidden_test_ids(record):
    assert sorted(record["expected_tests"]) == ["tests/test_basic.py::test_add", "tests/test_issue_mini_1.py::test_clamp_inside",
                                                "tests/test_issue_mini_1.py::test_clamp_upper"]
    # deselecting one hidden test from the project's config leaves it missing: 0, even with the fix in place
    # (a plugin named there is refused outright: tests/envs/test_code_attacks.py)
    _, reward = play(make_task(record), HONEST_FIX, call("write_file", path="pytest.ini", content="[pytest]\naddopts = -k 'not upper'\n"),
                     call("submit", answer="d"))
    assert reward.value == 0.0 and "not run: tests/test_issue_mini_1.py::test_clamp_upper" in reward.info["output"], reward.info


def test_a_grader_without_a_process_slot_is_an_infra_failure_not_a_zero(record):
    env = CodeEnv()
    try:
        env.reset(make_task(record))
        env.step(HONEST_FIX)
        env.sandbox.limits = replace(env.sandbox.limits, nproc=1)  # the runner cannot start its test process
        reward = env.score()
        assert reward.infra_error and "cannot start the test process" in reward.info["error"], reward.info
    finally:
        env.close()


def test_an_episode_holding_every_process_slot_does_not_zero_another_episodes_fix(record):
    import threading

    hog, honest = CodeEnv(), CodeEnv()
    try:
        hog.reset(make_task(record, "bash"))
        honest.reset(make_task(record))
        honest.step(HONEST_FIX)
        # the hog fills its process budget and holds it while the other episode is graded
        command = ("python3 -c 'import os, time\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
                   "    if pid == 0:\n        time.sleep(6); os._exit(0)\ntime.sleep(5)'")
        thread = threading.Thread(target=hog.step, args=(call("bash", command=command),))
        thread.start()
        import time
        time.sleep(1.5)
        reward = honest.score()
        thread.join()
        assert reward.value == 1.0 and not reward.infra_error, reward.info
    finally:
        hog.close()
        honest.close()


def test_code_episodes_refuse_a_sandbox_that_can_see_the_host_unless_told(record):
    from rlyard.sandbox import SandboxUnavailable, require_sealed

    env = CodeEnv(isolation="unshare")  # the fallback: the whole host file system is readable
    try:
        with pytest.raises(SandboxUnavailable, match="allow_weak_isolation"):
            env.reset(make_task(record))
        task = make_task(record)
        env.reset(replace(task, payload={**task.payload, "allow_weak_isolation": True}))  # the user's explicit opt-out
        assert not env.sandbox.sealed
    finally:
        env.close()
    assert require_sealed(False, "code") is True  # bubblewrap works on this machine, so the family runs sealed


PLANT = ("python3 -c \"import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
         "print('planted', libc.syscall(248, b'user', b'rlyard-plant', b'HIDDEN-TEST-TEXT', 16, -4), ctypes.get_errno())\"")
FETCH = ("python3 -c \"import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
         "print('found', libc.syscall(250, 10, -4, b'user', b'rlyard-plant', 0), ctypes.get_errno())\"")


@pytest.mark.skipif(__import__("platform").machine() != "x86_64", reason="syscall numbers of x86_64")
def test_a_key_planted_in_one_episode_is_not_readable_in_the_next(record):
    planted, _ = play(make_task(record, "bash"), call("bash", command=PLANT))
    found, _ = play(make_task(record, "bash"), call("bash", command=FETCH))
    assert "planted -1 1" in planted[0], planted  # add_key: EPERM from the seccomp filter
    assert "found -1 1" in found[0], found  # keyctl(KEYCTL_SEARCH) denied as well: nothing to read back
