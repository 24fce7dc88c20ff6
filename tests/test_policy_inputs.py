"""Policy failures score 0, platform failures are infra (rlyard/environment/outcomes.py, docs/reliability.md).

Every tool and every grader of every family is fed what a policy can produce - NUL bytes, lone
surrogates and bytes that are no UTF-8, 1 MB strings, JSON nested 100,000 deep, integers past
Python's digit limit, wrong types, thousands of arguments - played through the agent's own tools
as a policy would: no tool raises (each answers in words), no grader raises or says infra, and
every such episode scores 0 (or the family's honest value). The reverse holds too: a sandbox that
cannot start, a judge on a closed port, a missing compiler and a grader's own bug stay infra.
"""
from __future__ import annotations

import errno
import os
import json
import shutil
import socket
from pathlib import Path

import pytest

from rlyard.envs.checks import play_replies
from rlyard.envs import SingleTurnEnv, get_family
from rlyard.orchestrate.rollout import env_verdict
from rlyard.sandbox import bwrap_works
from rlyard.types import Reward, Task

pytestmark = pytest.mark.timeout(600)

REASON = "policy_input: "  # rlyard.environment.outcomes.REASON_PREFIX (spelled out: this file also runs on older code)
NEST = "[" * 100_000 + "]" * 100_000
MB = "A" * (1 << 20)
BIGINT = "9" * 5000  # past int()'s 4300-digit limit: json.loads and int() raise ValueError on it
TEXTS = {"nul": "a\x00b", "surrogate": "x\ud800y\udcff", "mb": MB, "nested": NEST, "bigint": BIGINT}
NEEDS = {"bwrap": bwrap_works(), "gcc": shutil.which("gcc") is not None, "abc2midi": shutil.which("abc2midi") is not None,
         "chromium": shutil.which("chromium") is not None and shutil.which("node") is not None}
FAMILY_NEEDS = {"files": ["bwrap"], "code": ["bwrap"], "cyber": ["bwrap", "gcc"], "general": ["bwrap"],
                "webdev": ["bwrap", "chromium"], "music": ["abc2midi"]}


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def raw_call(name: str, arguments_json: str) -> str:
    """A call whose arguments are JSON text as the policy wrote it (json.dumps cannot nest 100,000 deep)."""
    return '<tool_call>{"name": %s, "arguments": %s}</tool_call>' % (json.dumps(name), arguments_json)


def skip_without(family: str) -> None:
    missing = [need for need in FAMILY_NEEDS.get(family, []) if not NEEDS[need]]
    if missing:
        pytest.skip(f"{family} needs {', '.join(missing)}")


_tasks: dict[str, Task] = {}


def task_of(family: str) -> Task:
    """One small built-in task per family, made once per module (per worker)."""
    if family not in _tasks:
        fam = get_family(family)
        if family == "general":
            tasks = fam.make_tasks("eval", 100, 0, eval_percent=100, rules_only=True)
            _tasks["general"] = next(t for t in tasks if t.id.startswith("json_report_01"))
            _tasks["general_sql"] = next(t for t in tasks if t.id.startswith("sql_tool_01"))
        elif family == "webdev":
            _tasks[family] = next(t for t in fam.make_tasks("eval", 100, 0, eval_percent=100) if t.id == "landing_page")
        elif family in ("cyber", "code"):
            _tasks[family] = fam.make_tasks("eval", 1, 0, eval_percent=100)[0]
        else:
            _tasks[family] = fam.make_tasks("eval", 1, 0)[0]
    return _tasks[family]


def tool_fuzz(tools: list[dict], full: bool) -> list[tuple[str, str]]:
    """(label, reply) for every tool: its string arguments given hostile texts, wrong types, JSON
    nested 100,000 deep, an integer past the digit limit, arguments that are no object and (`full`)
    10,000 extra arguments. `full` gives every hostile text (1 MB ones too) to every string
    argument; otherwise a NUL and a lone surrogate go to the first (the tools are one ToolBox:
    the other families show their wiring, `files` and the SQL tools the whole set)."""
    replies = []
    for spec in tools:
        name, schema = spec["function"]["name"], spec["function"]["parameters"] or {}
        if name == "submit":
            continue  # ends the episode: the graders' cases below feed it
        props = schema.get("properties", {})
        required = {key: ("a" if props[key].get("type") == "string" else 1) for key in schema.get("required", [])}
        strings = [key for key, p in props.items() if p.get("type", "string") == "string"] or list(required) or ["x"]
        first = strings[0]
        for label in ("nul", "surrogate", "mb") if full else ("nul", "surrogate"):
            for key in strings if full else [first]:
                replies.append((f"{name}.{key}={label}", call(name, **{**required, key: TEXTS[label]})))
        for wrong in ([1, 2], None, 3.5, {"a": 1}, True, -1):
            replies.append((f"{name}.{first}={wrong!r}", call(name, **{**required, first: wrong})))
        replies.append((f"{name}.{first}=nested", raw_call(name, '{"%s": %s}' % (first, NEST))))
        replies.append((f"{name}.{first}=bigint", raw_call(name, '{"%s": %s}' % (first, BIGINT))))
        replies.append((f"{name}:args=list", raw_call(name, "[1, 2, 3]")))
        if full:
            replies.append((f"{name}:many", call(name, **{**required, first: "a", **{f"k{i}": i for i in range(10_000)}})))
    replies.append(("reply=nul+surrogate", "a\x00b\ud800" + call("bash", command="echo ok")))
    replies.append(("reply=nested", "<tool_call>" + NEST + "</tool_call>"))
    return replies


@pytest.mark.parametrize("family", ["files", "code", "cyber", "general", "general_sql", "webdev"])
def test_no_tool_raises_on_what_the_policy_writes(family):
    name = family.split("_")[0]
    skip_without(name)
    task_of(name)  # general's also makes general_sql, a task with SQL tools
    env = get_family(name).make_env()
    env.reset(_tasks[family])
    try:
        tools = env.toolbox.specs()
        if family == "general_sql":  # its file tools are general's: the task's own SQL tools, each fully
            from rlyard.agent.tools import SPECS
            tools = [t for t in tools if t["function"]["name"] not in SPECS]
        assert len(tools) >= 2
        for label, reply in tool_fuzz(tools, full=family in ("files", "general_sql")):
            result = env.step(reply)  # raising here would make the episode infra
            assert not result.done, label
            assert result.messages and result.messages[0]["content"].strip(), label
        if family == "code":  # a harness's exec function (mini_swe_agent's commands) is a tool too
            for label in ("nul", "surrogate", "mb"):
                result = env.run_command(TEXTS[label])
                assert result.exit_code != 0 and result.output.startswith("error: the command"), label
    finally:
        env.close()


# ----------------------------------------------------------------- graders
def write(path: str, content: str) -> str:
    return call("write_file", path=path, content=content)


def printf(path: str, data: bytes) -> str:
    """A bash call that writes raw bytes (no UTF-8, NULs) where the policy wants them."""
    octal = "".join("\\%03o" % b for b in data)
    return call("bash", command=f"mkdir -p $(dirname {path}) && printf '{octal}' > {path}")


SOURCES = "for f in $(git ls-files '*.py' | grep -v test); do "
BAD_BYTES = b"\xff\xfe\x00bad\xc3(\x00\xed\xa0\x80"  # no UTF-8: a lone continuation, a NUL, an encoded surrogate
SUBMIT_TEXTS = [(label, call("submit", answer=text)) for label, text in TEXTS.items() if label not in ("nested", "bigint")] + [
    ("submit=nested", raw_call("submit", '{"answer": %s}' % NEST)), ("submit=bigint", raw_call("submit", '{"answer": %s}' % BIGINT)),
    ("submit=list", call("submit", answer=["a", "b"])), ("submit=null", call("submit", answer=None))]

GRADER_CASES = [
    *[("files", label, [reply]) for label, reply in SUBMIT_TEXTS],
    *[("cyber", f"path:{label}", [reply]) for label, reply in SUBMIT_TEXTS],
    ("cyber", "path:deep", [call("submit", answer="/".join(["a"] * 5000))]),
    ("cyber", "poc:1MB", [write("poc.bin", MB), call("submit", answer="poc.bin")]),
    ("cyber", "poc:bytes", [printf("poc.bin", BAD_BYTES), call("submit", answer="poc.bin")]),
    ("general", "report:nested", [write("report.json", NEST), write("answer.md", "done"), call("submit", answer="done")]),
    ("general", "report:bigint", [write("report.json", '{"total_incidents": %s}' % BIGINT), call("submit", answer="done")]),
    ("general", "report:bytes", [printf("report.json", BAD_BYTES), printf("answer.md", BAD_BYTES), call("submit", answer="x")]),
    ("general", "report:list", [write("report.json", "[1, 2]"), call("submit", answer="done")]),
    ("general", "answer:surrogate", [call("submit", answer="x\ud800y")]),
    ("general", "answer:nul", [call("submit", answer="a\x00b")]),
    ("general", "answer:1MB", [write("answer.md", MB + "\n"), call("submit", answer="done")]),
    ("general", "answer:nested", [write("answer.md", NEST), call("submit", answer="done")]),
    ("webdev", "html:bytes", [printf("dist/index.html", b"<html><body><h1>" + BAD_BYTES + b"</h1></body></html>"), call("submit", answer="done")]),
    ("webdev", "html:nested", [write("dist/index.html", "<div>" * 5_000), call("submit", answer="done")]),
    # appended to every module of the package the hidden tests import
    ("code", "source:bytes", [printf("bad.bin", BAD_BYTES), call("bash", command=SOURCES + "cat bad.bin >> $f; done"),
                              call("submit", answer="done")]),
    ("code", "source:nested", [write("deep.txt", "\nx = " + "(" * 100_000 + ")" * 100_000 + "\n"),
                               call("bash", command=SOURCES + "cat deep.txt >> $f; done"), call("submit", answer="done")]),
]


def play(family: str, replies: list[str]) -> Reward:
    """The replies through the family's env as an agent's turns (a turn that ends the episode ends
    them), then its grader; the env is closed after."""
    return play_replies(get_family(family).make_env(), task_of(family), replies)


def assert_zero_not_infra(reward, label: str) -> None:
    assert isinstance(reward, Reward), label
    assert not reward.infra_error, f"{label}: infra {reward.info}"
    assert reward.value == 0.0, f"{label}: {reward.value} {reward.info}"
    if reward.components.get("policy_input"):
        assert reward.info["reason"].startswith(REASON), label


@pytest.mark.parametrize("family,label,replies", GRADER_CASES, ids=[f"{f}-{label}" for f, label, _ in GRADER_CASES])
def test_no_grader_raises_or_says_infra_on_what_the_policy_wrote(family, label, replies):
    skip_without(family)
    assert_zero_not_infra(play(family, replies), f"{family} {label}")


REPLY_TEXTS = {**TEXTS, "parens": "(" * 100_000 + "1" + ")" * 100_000, "power": "<answer>9**9**9**9</answer>",
               "boxed": "\\boxed{" * 50_000, "answer_bigint": f"The answer is {BIGINT}.", "json": '{"a": %s}' % NEST}
TUNE = "X:1\nT:t\nM:4/4\nL:1/8\nQ:1/4=120\nK:G\n"
TUNES = {"bigint_length": TUNE + f"G{BIGINT}|]", "surrogate": TUNE + "GA\ud800Bc d2B2|]", "mb": TUNE + "GABc d2B2|" * 100_000,
         "chords": TUNE + "[" * 30_000 + "G" + "]" * 30_000, "meter": "X:1\nM:99999999999999999999/1\nL:1/0\nK:G\nGABc|]",
         "bytes": TUNE + "GABc \udcff\udcfe d2|]", "nested": NEST}
SINGLE_CASES = [("arith", k, v) for k, v in REPLY_TEXTS.items()] + [("countdown", k, v) for k, v in REPLY_TEXTS.items()] + [
    ("music", k, v) for k, v in TUNES.items()]


@pytest.mark.parametrize("family,label,reply", SINGLE_CASES, ids=[f"{f}-{label}" for f, label, _ in SINGLE_CASES])
def test_single_turn_graders_score_what_the_policy_wrote_never_infra(family, label, reply):
    """Through the single-turn rollout's own step-and-score (`env_verdict`), as a sampled reply would go."""
    skip_without(family)
    fam = get_family(family)
    env = fam.make_env()
    env.reset(task_of(family))
    reward, error = env_verdict(env, reply)
    assert error is None, f"{family} {label}: {error}"
    assert_zero_not_infra(reward, f"{family} {label}")


def test_the_dataset_familys_builtin_reward_functions_score_what_the_policy_wrote():
    """The dataset family grades with `env.reward` functions; rlyard's own ones never raise on a reply."""
    from rlyard.rewards import load_rewards, score_samples
    # math_equal's math-verify child has its own attack tests and a 5 s deadline: the texts it is slow on are left out
    for names, labels in ((["exact_match", "json_valid", "boxed_format", "think_format"], list(REPLY_TEXTS)),
                          (["math_equal"], ["nul", "surrogate", "nested", "bigint", "power"])):
        functions = load_rewards([f"rlyard.rewards:{name}" for name in names])
        tasks = [Task(id=f"t{i}", prompt=[{"role": "user", "content": "2+2?"}], env="dataset", payload={"answer": "4"})
                 for i in range(len(labels))]
        texts = [REPLY_TEXTS[label] for label in labels]
        for label, reward in zip(labels, score_samples(functions, tasks, texts, [[1]] * len(texts))):
            assert not reward.infra_error, f"{label}: {reward.info}"
            assert reward.value == 0.0, label  # JSON nested past the parser's depth is no valid JSON either


# ----------------------------------------------------------------- the rule, and the reverse: platform faults stay infra
def test_the_rule_tells_the_policys_failures_from_the_platforms():
    from rlyard.environment.deadline import GraderTimeout
    from rlyard.envs.judge import JudgeUnavailable
    from rlyard.environment.outcomes import PlatformError, PolicyInputError, policy_reason
    from rlyard.sandbox import SandboxError, SandboxUnavailable

    def raised_from(error, cause):
        error.__cause__ = cause
        return error

    policy = [ValueError("embedded null byte"), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), RecursionError("maximum recursion depth exceeded"),
        json.JSONDecodeError("Expecting value", "x", 0), PolicyInputError("the PoC path is not text"),
        ValueError("Exceeds the limit (4300 digits) for integer string conversion"), OverflowError("int too large"),
        OSError(errno.ENAMETOOLONG, "File name too long"), OSError(errno.ELOOP, "Too many levels of symbolic links")]
    platform = [SandboxError("bwrap could not start"), SandboxUnavailable("no bubblewrap"), GraderTimeout("900 s"),
                JudgeUnavailable("connection refused"), PlatformError("no compiler"), OSError(errno.ECONNREFUSED, "refused"),
                FileNotFoundError(errno.ENOENT, "no such file", "gcc"), KeyError("expected"), TypeError("a bug"),
                AttributeError("'NoneType' object has no attribute 'x'"), RuntimeError("score() called before reset()"),
                raised_from(RecursionError("deep"), JudgeUnavailable("down")),  # a platform fault under a data-shaped one
                raised_from(ValueError("embedded null byte"), SandboxError("cannot start"))]
    policy.append(raised_from(PolicyInputError("the path is not a file"), FileNotFoundError(errno.ENOENT, "gone")))
    assert all(policy_reason(e) for e in policy), [e for e in policy if not policy_reason(e)]
    assert not any(policy_reason(e) for e in platform), [e for e in platform if policy_reason(e)]


def test_a_verifier_crash_on_the_reply_is_0_with_its_reason_and_a_grader_bug_is_infra():
    task = Task(id="t", prompt=[{"role": "user", "content": "q"}], env="x")

    def reads_a_path(reply: str, task: Task) -> Reward:
        os.stat(reply)  # a NUL byte in the reply: ValueError from the os layer, before any OSError
        return Reward(1.0)

    def buggy(reply: str, task: Task) -> Reward:
        return Reward({}["missing"])

    env = SingleTurnEnv(reads_a_path)
    env.reset(task)
    reward, error = env_verdict(env, "poc\x00.bin")
    assert error is None and reward.value == 0.0 and not reward.infra_error
    assert reward.info["reason"].startswith(REASON + "a NUL byte") and reward.components == {"policy_input": 1.0}
    env = SingleTurnEnv(buggy)
    env.reset(task)
    reward, error = env_verdict(env, "fine")
    assert reward is None and "KeyError" in error  # infra: the rollout flags the episode and it leaves its group


class ThirdPartyEnv:
    """An environment of the Protocol's shape only (no rlyard base class): the rollout draws the line for it."""

    def reset(self, task):
        return list(task.prompt)

    def step(self, reply):
        self.reply = reply.encode("utf-8")  # a lone surrogate in the reply: UnicodeEncodeError

    def score(self):
        return Reward(float(json.loads(self.reply) == 4))  # nested 100,000 deep: RecursionError

    def close(self):
        pass


@pytest.mark.parametrize("reply,zero", [("x\ud800", True), (NEST, True), ("4", False), ("{", True)])
def test_the_single_turn_rollout_draws_the_line_for_any_environment(reply, zero):
    env = ThirdPartyEnv()
    env.reset(Task(id="t", prompt=[{"role": "user", "content": "2+2 as JSON"}], env="x"))
    reward, error = env_verdict(env, reply)
    assert error is None and not reward.infra_error
    assert reward.value == (0.0 if zero else 1.0) and bool(reward.components.get("policy_input")) == zero


def test_a_sandbox_that_cannot_start_is_infra_not_a_tool_error(monkeypatch, tmp_path):
    skip_without("files")
    from rlyard.sandbox import Sandbox, SandboxError
    env = get_family("files").make_env()
    env.reset(task_of("files"))
    real = Sandbox._bwrap_argv
    missing = str(tmp_path / "bwrap")  # the sandbox's binary is gone
    monkeypatch.setattr(Sandbox, "_bwrap_argv", lambda self, *args: [missing, *real(self, *args)[1:]])
    try:
        for reply in (call("bash", command="echo hi"), call("read_file", path="a\x00b")):  # a NUL on top changes nothing
            with pytest.raises(SandboxError, match="could not start|cannot start"):
                env.step(reply)  # raised: the agent loop flags the episode infra; never a tool error the policy eats
    finally:
        monkeypatch.undo()
        env.close()


def test_a_judge_on_a_closed_port_is_infra(tmp_path):
    skip_without("general")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    judge = {"base_url": f"http://127.0.0.1:{closed}/v1", "model": "judge-x", "cache_dir": str(tmp_path),
             "retries": 1, "backoff_s": 0.01, "timeout_s": 2}
    family = get_family("general")
    tasks = family.make_tasks("eval", 100, 0, eval_percent=100, judge=judge)
    task = next(t for t in tasks if t.id.startswith("summarise_01"))
    env = family.make_env()
    try:
        env.reset(task)
        env.step(call("submit", answer="The outage was caused by an expired certificate; it was renewed."))
        reward = env.score()
    finally:
        env.close()
    assert reward.infra_error and "judge" in reward.info["error"]


def test_a_missing_compiler_is_infra(monkeypatch):
    skip_without("cyber")
    from rlyard.envs.cyber import verify
    from rlyard.envs.cyber.env import CyberEnv
    from rlyard.environment.outcomes import policy_reason
    monkeypatch.setattr(verify, "CC", "rlyard-no-such-compiler")
    monkeypatch.setattr(verify, "_builds", {})
    env = CyberEnv()
    try:
        with pytest.raises(verify.GraderUnavailable) as raised:
            env.reset(task_of("cyber"))
    finally:
        env.close()
    assert policy_reason(raised.value) is None
    target = verify.Target(**task_of("cyber").payload["target"])
    assert verify.grade_bytes(target, b"AAAA").reward.infra_error


def test_the_run_counts_the_episodes_the_policys_output_made_fail():
    from rlyard.orchestrate.run import rollout_metrics
    from rlyard.types import Trajectory

    def episode(components, infra=False):
        return Trajectory(task_id="t", group_id="g", token_ids=[1, 2], loss_mask=[0, 1], behaviour_logprobs=[0.0, -1.0],
                          policy_versions=[-1, 0], components=components, infra_error=infra)
    batch = [episode({"policy_input": 1.0}), episode({"policy_input": 1.0}), episode({}), episode({}, infra=True)]
    metrics = rollout_metrics(batch)
    assert metrics["rollout/policy_input_errors"] == 2.0 and metrics["rollout/infra_errors"] == 1.0
