"""Third-party harnesses as arms: mini-swe-agent through a real gateway, its commands in the real sandbox.

A random tiny model never writes a tool call, so the main test teaches it two (`teach` from
test_agent). The prompts it is taught on are read back from the gateway's own record of a probe
run, turn by turn, so the test needs only the gateway's HTTP contract, not how it renders.
"""
import socket
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from openai import OpenAI

from test_agent import STOP, teach

from rlyard.agent.loop import AgentLimits
from rlyard.agent.toolcalls import hermes_call, render_tool_specs
from rlyard.engines import HFEngine
from rlyard.envs.code.env import CodeEnv
from rlyard.envs.code.repo import make_patch
from rlyard.envs.code.tasks import DEFAULTS, builtin_records
from rlyard.harness import HarnessEpisode, HarnessOutcome, register_harness
from rlyard.harness.gateway import MODEL_NAME, Gateway
from rlyard.harness.mini_swe_agent import MiniSweAgent, SandboxEnvironment
from rlyard.harness.runner import play_episodes
from rlyard.serve.sessions import with_system
from rlyard.types import SamplingParams, Task, Trajectory

CLEAN = "def clamp(x, low, high):\n    return max(low, min(x, high))\n"
BUGGY = CLEAN.replace("min(x, high)", "min(x, high - 1)")
HIDDEN = "from mini import clamp\n\n\ndef test_clamp_upper():\n    assert clamp(10, 0, 5) == 5\n"
HIDDEN_FILE = "tests/test_issue_mini_1.py"
MAX_TOKENS = 96
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=MAX_TOKENS, stop_token_ids=STOP)
LIMITS = AgentLimits(max_turns=4, max_tokens_per_turn=MAX_TOKENS, max_total_tokens=4096)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture(scope="module")
def builtin_root(tmp_path_factory) -> Path:
    """A one-task built-in set: the clamp bug, its hidden test (kept on the host, outside every workspace)."""
    root = tmp_path_factory.mktemp("builtin")
    write(root / "mini" / "repo", {"mini/__init__.py": CLEAN,
                                   "tests/test_basic.py": "from mini import clamp\n\n\ndef test_inside():\n    assert clamp(3, 0, 5) == 3\n"})
    write(root / "mini" / "tasks" / "mini-1", {"bug.patch": make_patch({"mini/__init__.py": CLEAN}, {"mini/__init__.py": BUGGY}),
                                               HIDDEN_FILE: HIDDEN,
                                               "task.yaml": "problem_statement: clamp(10, 0, 5) returns 4, not 5.\ndifficulty: easy\n"})
    return root


@pytest.fixture(scope="module")
def record(builtin_root):
    [record] = builtin_records(builtin_root)
    return record


def harness_task(record, arm: str, tools=("bash",)) -> Task:
    """The task with every group drawn onto `arm` (a harness arm listed beside the tool arms)."""
    payload = {**record, "arms": {**DEFAULTS["arms"], arm: list(tools)}, "arm_weights": {arm: 1.0}, "guard": True,
               "tool_format": "hermes", "timeout_is_infra": True, "seed": 0}
    return Task(id=record["instance_id"], prompt=[], env="code", payload=payload, metadata={"round": "0/"})


def turn_prompts(segments: list[Trajectory]) -> list[list[int]]:
    """The prompt of every model call of a session, in order: the tokens before each sampled run."""
    prompts = []
    for t in segments:
        prompts += [t.token_ids[:i] for i in range(len(t.loss_mask)) if t.loss_mask[i] and (i == 0 or not t.loss_mask[i - 1])]
    return prompts


def probe(tiny_model, tokenizer, task: Task, turns: int) -> tuple[list[list[int]], CodeEnv]:
    """mini-swe-agent plays `turns` greedy turns on a fresh workspace; the turn prompts the gateway
    recorded, and the (still open) environment. A fresh engine: it sees the weights as taught so far."""
    env = CodeEnv()
    messages = env.reset(task)
    with Gateway(HFEngine(tiny_model, tokenizer.pad_token_id), tokenizer, STOP, LIMITS.max_total_tokens, MAX_TOKENS) as gateway:
        episode = HarnessEpisode(gateway.base_url("probe"), MODEL_NAME, env.workspace, env.run_command,
                                 messages[-1]["content"], max_turns=turns, max_tokens=MAX_TOKENS, temperature=0.0)
        gateway.serve_while(MiniSweAgent(), episode)
        return turn_prompts(gateway.trajectories("probe")), env


class Recording(MiniSweAgent):
    """The real harness, keeping each episode's agent so the test can read what it sent."""

    def __init__(self):
        super().__init__()
        self.agents = []

    def build(self, episode):
        agent = super().build(episode)
        self.agents.append(agent)
        return agent


def assert_tokens_are_the_template(trajectory: Trajectory, sent: list[dict], replies: list[str], tools: list[dict], tokenizer):
    """Every turn's recorded prompt is the chat template of the messages the harness sent (the
    gateway's tool instructions in the system message), each assistant message being the exact
    reply the policy sampled; every reply's tokens are sampled (mask 1), nothing else is."""
    replies = list(replies)
    conversation = with_system([{"role": m["role"], "content": replies.pop(0) if m["role"] == "assistant" else m["content"]}
                                for m in sent], render_tool_specs(tools, "hermes"))
    assert not replies
    position = 0
    for k, message in enumerate(conversation):
        if message["role"] != "assistant":
            continue
        prompt = list(tokenizer.apply_chat_template(conversation[:k], add_generation_prompt=True, tokenize=True, return_dict=False))
        reply = tokenizer(message["content"], add_special_tokens=False).input_ids + [STOP[0]]
        end = len(prompt) + len(reply)
        assert trajectory.token_ids[:len(prompt)] == prompt, f"turn prompt before message {k}"
        assert not any(trajectory.loss_mask[position:len(prompt)])
        assert trajectory.token_ids[len(prompt):end] == reply and all(trajectory.loss_mask[len(prompt):end])
        position = end
    assert position == len(trajectory.token_ids)


def test_mini_swe_agent_fixes_a_code_task_through_the_gateway_with_commands_in_the_sandbox(record, tiny_model, tokenizer):
    from minisweagent.models.utils.actions_toolcall import BASH_TOOL  # after rlyard's module: it silences the banner

    host_probe = Path("/tmp/rlyard-harness-probe")  # a fixed, short command: quicker to teach
    host_probe.unlink(missing_ok=True)
    replies = [hermes_call("bash", {"command": f'sed -i "s/ - 1//" mini/__init__.py; echo hi > note.txt; touch {host_probe}'}),
               hermes_call("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})]
    task = harness_task(record, "mini_swe_agent")
    # teach turn by turn: each probe plays as far as the model has been taught and records the next prompt
    examples = []
    for turn, reply in enumerate(replies):
        prompts, env = probe(tiny_model, tokenizer, task, turn + 1)
        try:
            assert len(prompts) == turn + 1, "the model did not repeat what it was taught"
            if turn == 1:  # the taught first command ran: inside the sandbox, on the episode's workspace
                assert (env.workspace / "note.txt").read_text() == "hi\n"
                assert "high - 1" not in (env.workspace / "mini/__init__.py").read_text()
                assert not host_probe.exists() and not Path("note.txt").exists()  # nothing landed on the host
        finally:
            env.close()
        examples.append((prompts[turn], reply))
        teach(tiny_model, tokenizer, examples)

    # the real thing: the rollout's entry point, the arm drawn for the group, graded by the env's own grader
    harness = Recording()
    register_harness("recorded_mini_swe_agent", lambda: harness)
    engine = HFEngine(tiny_model, tokenizer.pad_token_id)
    [trajectory] = play_episodes(engine, tokenizer, [CodeEnv()], [harness_task(record, "recorded_mini_swe_agent")], ["0/0:mini-1"],
                                 GREEDY, LIMITS)
    assert not trajectory.infra_error and trajectory.finish_reason == "submitted", trajectory.completion_text
    assert trajectory.reward == 1.0 and trajectory.components["passed"] == 1.0  # the hidden test passes on the final workspace
    assert trajectory.components["arm_recorded_mini_swe_agent"] == 1.0 and trajectory.components["tool_calls"] == 2.0
    assert trajectory.components["submitted"] == 1.0 and trajectory.turns == 2 and trajectory.group_id == "0/0:mini-1"
    assert {v for v, m in zip(trajectory.policy_versions, trajectory.loss_mask) if m} == {engine.policy_version}
    assert not host_probe.exists()
    [agent] = harness.agents
    sent = [m for m in agent.messages if m["role"] != "exit"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant"]
    assert sent[2]["tool_calls"][0]["function"]["name"] == "bash"  # mini-swe-agent got a parsed tool call back
    assert_tokens_are_the_template(trajectory, sent, replies, [BASH_TOOL], tokenizer)


def test_a_harness_command_reaches_neither_the_host_nor_the_hidden_tests(record, builtin_root, tmp_path, tiny_model, tokenizer):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-SECRET-42")
    hidden_on_host = builtin_root / "mini" / "tasks" / "mini-1" / HIDDEN_FILE
    packaged_hidden = next(Path(__file__).resolve().parents[1].glob("rlyard/envs/code/builtin/*/tasks/*/tests/test_*.py"))
    host_probe = Path(f"/tmp/rlyard-harness-probe-{uuid.uuid4().hex}")
    env = CodeEnv()
    env.reset(harness_task(record, "mini_swe_agent"))
    shell = SandboxEnvironment(env.run_command)  # what mini-swe-agent executes its actions through
    try:
        with Gateway(HFEngine(tiny_model, tokenizer.pad_token_id), tokenizer, STOP, 4096) as gateway:
            port = int(gateway.root.rsplit(":", 1)[1])
            outputs = {command: shell.execute({"command": command}) for command in [
                f"cat {secret}", f"ls {tmp_path}", f"cat {hidden_on_host}", f"cat {packaged_hidden}",
                "find / -name '*issue_mini*' -not -path '/proc/*' 2>/dev/null; echo searched",
                f"cat {HIDDEN_FILE}", f"touch {host_probe} && echo x > {tmp_path}/planted.txt",
                f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"",
            ]}
            assert socket.create_connection(("127.0.0.1", port), 2)  # the gateway is up: only the sandbox cannot reach it
        for command, out in outputs.items():
            assert "HOST-SECRET-42" not in out["output"] and "assert clamp(10, 0, 5) == 5" not in out["output"], command
        assert outputs[f"cat {secret}"]["returncode"] != 0 and outputs[f"cat {packaged_hidden}"]["returncode"] != 0
        assert outputs["find / -name '*issue_mini*' -not -path '/proc/*' 2>/dev/null; echo searched"]["output"].strip() == "searched"
        assert "Permission denied" in outputs[f"cat {HIDDEN_FILE}"]["output"]  # the guard answers, the command does not run
        assert not host_probe.exists() and not (tmp_path / "planted.txt").exists()
        assert outputs[f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\""]["returncode"] != 0
        verdict = env.score()
        assert verdict.value == 0.0 and verdict.components["guard_blocks"] >= 1.0 and not verdict.infra_error
    finally:
        env.close()


def test_an_episode_that_outgrows_the_token_budget_ends_there_and_is_graded(record, tiny_model, tokenizer):
    task = harness_task(record, "mini_swe_agent")
    prompts, env = probe(tiny_model, tokenizer, task, 1)
    env.close()
    # room for the first reply only: the gateway refuses the second call (its context window is the budget)
    limits = AgentLimits(max_turns=4, max_tokens_per_turn=40, max_total_tokens=len(prompts[0]) + 60)
    group = play_episodes(HFEngine(tiny_model, tokenizer.pad_token_id), tokenizer, [CodeEnv()], [task], ["0/0:mini-1"],
                          replace(GREEDY, max_new_tokens=40), limits)
    assert [t.finish_reason for t in group] == ["token_budget"] and not group[0].infra_error
    assert group[0].turns == 1 and len(group[0].token_ids) <= limits.max_total_tokens and "passed" in group[0].components


# The custom harness of docs/agents.md ("Harnesses as arms"), as it is printed there.
def one_shot(episode: HarnessEpisode) -> HarnessOutcome:
    """Ask the policy for a shell command, run it in the sandbox, show it the output; max_turns times."""
    client = OpenAI(base_url=episode.base_url, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": f"{episode.task}\n\nReply with one shell command."}]
    for _ in range(episode.max_turns):
        reply = client.chat.completions.create(model=episode.model, messages=messages, max_tokens=episode.max_tokens,
                                               temperature=episode.temperature, seed=episode.seed)
        command = reply.choices[0].message.content or ""
        result = episode.exec(command)  # runs in the episode's sandbox, never on the host
        messages += [{"role": "assistant", "content": command},
                     {"role": "user", "content": f"exit code {result.exit_code}\n{result.output}"}]
    return HarnessOutcome("turn_limit")


def test_a_custom_harness_plays_a_whole_group_and_each_episode_is_graded(record, tiny_model, tokenizer):
    register_harness("one_shot", lambda: one_shot)
    engine = HFEngine(tiny_model, tokenizer.pad_token_id)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, stop_token_ids=STOP, seed=3)
    limits = AgentLimits(max_turns=2, max_tokens_per_turn=8, max_total_tokens=4096)
    task = harness_task(record, "one_shot")
    group = play_episodes(engine, tokenizer, [CodeEnv(), CodeEnv()], [task, task], ["0/0:mini-1"] * 2, params, limits)
    assert len(group) == 2  # one continued conversation per episode: one trajectory each
    for trajectory in group:
        assert not trajectory.infra_error and trajectory.finish_reason == "turn_limit", trajectory.completion_text
        assert trajectory.turns == 2 and trajectory.components["tool_calls"] == 2.0 and trajectory.reward == 0.0
        assert "passed" in trajectory.components and trajectory.components["arm_one_shot"] == 1.0  # graded by the env
        assert len(trajectory.token_ids) == len(trajectory.loss_mask) == len(trajectory.behaviour_logprobs)
        assert 2 <= sum(trajectory.loss_mask) <= 16 and trajectory.prompt_length > 0
    assert group[0].token_ids != group[1].token_ids  # each episode asked with its own seed


def test_a_harness_that_breaks_is_an_infra_failure_not_a_zero(record, tiny_model, tokenizer):
    def broken(episode: HarnessEpisode) -> HarnessOutcome:
        OpenAI(base_url=episode.base_url, api_key="unused", max_retries=0).chat.completions.create(
            model=episode.model, messages=[{"role": "user", "content": episode.task}], max_tokens=4)
        raise RuntimeError("harness bug")

    register_harness("broken", lambda: broken)
    engine = HFEngine(tiny_model, tokenizer.pad_token_id)
    [trajectory] = play_episodes(engine, tokenizer, [CodeEnv()], [harness_task(record, "broken")], ["0/0:mini-1"], GREEDY, LIMITS)
    assert trajectory.infra_error and trajectory.finish_reason == "infra_error"
    assert "RuntimeError: harness bug" in trajectory.completion_text and trajectory.turns == 1


def test_a_harness_arm_with_tools_it_cannot_use_is_refused_naming_the_option(record):
    with pytest.raises(ValueError, match=r"code option arms\.mini_swe_agent: a harness arm acts through shell commands only"):
        CodeEnv().harness_for(harness_task(record, "mini_swe_agent", tools=("bash", "edit_file")))
    assert CodeEnv().harness_for(harness_task(record, "bash", tools=("bash", "submit"))) is None  # a tool arm
