"""The multi-turn loop keeps sampled tokens as sampled and masks everything else."""
import pytest

from rlyard.agent.loop import AgentLimits, TemplateRenderer, cut_middle, run_episodes, trim_prompt
from rlyard.engines import HFEngine
from rlyard.environment import StepResult
from rlyard.types import Reward, SamplingParams, Task

STOP = (2,)  # <|im_end|>


class RecordingEngine(HFEngine):
    """The real engine; it also keeps what it returned, to compare with the recorded episode."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def generate(self, prompts, params, n=1):
        out = super().generate(prompts, params, n)
        self.calls.append(out)
        return out


class EchoEnv:
    """Answers every reply with a tool message; done after `turns` replies (or never)."""

    def __init__(self, turns=3, fail_on_step=False):
        self.turns, self.fail_on_step, self.seen = turns, fail_on_step, []

    def reset(self, task):
        return list(task.prompt)

    def step(self, reply):
        if self.fail_on_step:
            raise RuntimeError("tool crashed")
        self.seen.append(reply)
        if len(self.seen) >= self.turns:
            return StepResult(done=True, reason="submitted")
        return StepResult(messages=[{"role": "tool", "content": f"observation {len(self.seen)}: " + "x" * 50}], done=False)

    def score(self):
        return Reward(value=float(len(self.seen)), components={"turns": float(len(self.seen))})

    def close(self):
        pass


def task(text="Say something."):
    return Task(id="t", prompt=[{"role": "user", "content": text}], env="echo")


@pytest.fixture
def engine(tiny_model, tokenizer):
    return RecordingEngine(tiny_model, tokenizer.pad_token_id)


def test_recorded_tokens_are_the_samples_plus_rendered_tool_messages(engine, tokenizer):
    envs = [EchoEnv(turns=3), EchoEnv(turns=2)]
    limits = AgentLimits(max_turns=5, max_tokens_per_turn=6, max_total_tokens=10_000)
    # A random tiny model rarely samples <|im_end|>: with every id a stop token, each reply is one
    # token that ends its turn, and the conversation goes on through the tool messages.
    forced = SamplingParams(temperature=1.0, max_new_tokens=6, stop_token_ids=tuple(range(len(tokenizer))), seed=0)
    trajs = run_episodes(engine, tokenizer, envs, [task(), task("Hi.")], ["g", "g"], forced, limits)
    renderer = TemplateRenderer(tokenizer, forced.stop_token_ids)
    for index, (traj, env) in enumerate(zip(trajs, envs)):
        assert traj.finish_reason == "submitted" and traj.turns == env.turns and traj.reward == env.turns
        expected = renderer.prompt(env.reset(task() if index == 0 else task("Hi.")))
        mask = [0] * len(expected)
        turn_calls = [call for call in engine.calls if len(call) > index][: env.turns]
        for turn, call in enumerate(turn_calls):
            sampled = call[index][0].token_ids
            expected += sampled
            mask += [1] * len(sampled)
            if turn < env.turns - 1:
                rendered = renderer.after_reply([{"role": "tool", "content": f"observation {turn + 1}: " + "x" * 50}])
                expected += rendered
                mask += [0] * len(rendered)
        assert traj.token_ids == expected
        assert traj.loss_mask == mask
        sampled_logprobs = [lp for lp, m in zip(traj.behaviour_logprobs, traj.loss_mask) if m]
        assert sampled_logprobs == [lp for call in turn_calls for lp in call[index][0].logprobs]
        assert all(v == 0 for v, m in zip(traj.policy_versions, traj.loss_mask) if m)
        assert all(v == -1 for v, m in zip(traj.policy_versions, traj.loss_mask) if not m)


def test_tool_message_rendering_matches_the_chat_template(tokenizer):
    renderer = TemplateRenderer(tokenizer, STOP)
    conversation = [{"role": "user", "content": "list files"}, {"role": "assistant", "content": "ls"}]
    tool = [{"role": "tool", "content": "a.txt\nb.txt"}]
    full = tokenizer.apply_chat_template(conversation + tool, tokenize=False, add_generation_prompt=True)
    head = tokenizer.apply_chat_template(conversation, tokenize=False)
    # the sampled reply ends with <|im_end|>: what follows it must complete the template exactly
    assert head.endswith("<|im_end|>\n")
    assert head[: -len("\n")] + tokenizer.decode(renderer.after_reply(tool)) == full


def test_turn_limit_and_token_budget(engine, tokenizer):
    forced = SamplingParams(temperature=1.0, max_new_tokens=4, stop_token_ids=tuple(range(len(tokenizer))), seed=1)
    [traj] = run_episodes(engine, tokenizer, [EchoEnv(turns=99)], [task()], ["g"], forced, AgentLimits(max_turns=3, max_total_tokens=10_000))
    assert traj.finish_reason == "turn_limit" and traj.turns == 3
    budget = len(TemplateRenderer(tokenizer, STOP).prompt(task().prompt)) + 40
    [traj] = run_episodes(engine, tokenizer, [EchoEnv(turns=99)], [task()], ["g"], forced, AgentLimits(max_turns=99, max_total_tokens=budget))
    assert traj.finish_reason == "token_budget" and len(traj.token_ids) <= budget


def test_a_reply_cut_by_the_per_turn_cap_ends_the_episode(engine, tokenizer):
    never_stops = SamplingParams(temperature=1.0, max_new_tokens=5, stop_token_ids=(), seed=2)
    [traj] = run_episodes(engine, tokenizer, [EchoEnv(turns=9)], [task()], ["g"], never_stops, AgentLimits(max_tokens_per_turn=5))
    assert traj.finish_reason == "turn_token_limit" and traj.num_sampled_tokens == 5


def test_a_crashing_tool_is_an_infra_failure(engine, tokenizer):
    forced = SamplingParams(temperature=1.0, max_new_tokens=3, stop_token_ids=tuple(range(len(tokenizer))), seed=3)
    [traj] = run_episodes(engine, tokenizer, [EchoEnv(fail_on_step=True)], [task()], ["g"], forced)
    assert traj.infra_error and traj.finish_reason == "infra_error" and "tool crashed" in traj.completion_text


def test_cut_middle_keeps_head_and_tail():
    text = "HEAD" + "m" * 100 + "TAIL"
    out = cut_middle(text, 20)
    assert out.startswith("HEADmmmmmm") and out.endswith("mmmmmmTAIL") and "88 characters cut" in out  # 108 - 20
    assert cut_middle("short", 20) == "short"


def test_an_overlong_first_prompt_loses_the_middle_of_the_task_text(tokenizer):
    renderer = TemplateRenderer(tokenizer, STOP)
    text = "START of the task. " + "filler words here " * 300 + "END: the question."
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]
    trimmed = trim_prompt(renderer, messages, 200)
    assert len(renderer.prompt(trimmed)) <= 200
    assert trimmed[0] == messages[0]  # the system prompt is untouched
    content = trimmed[1]["content"]
    assert content.startswith("START of the task.") and content.endswith("END: the question.") and "characters cut" in content
    assert trim_prompt(renderer, messages, 10_000) == messages


def test_a_groups_first_turn_is_one_prompt_with_n_samples(engine, tokenizer):
    """n copies of one task share one prefill on turn 1; later turns (different prompts) go one by one."""
    envs = [EchoEnv(turns=2) for _ in range(6)]
    tasks = [task()] * 3 + [task("Hi.")] * 3
    limits = AgentLimits(max_turns=2, max_tokens_per_turn=4, max_total_tokens=10_000)
    forced = SamplingParams(temperature=1.0, max_new_tokens=4, stop_token_ids=tuple(range(len(tokenizer))), seed=0)
    trajs = run_episodes(engine, tokenizer, envs, tasks, ["a"] * 3 + ["b"] * 3, forced, limits)
    first, second = engine.calls
    assert [len(group) for group in first] == [3, 3]  # two prompts, three samples each
    assert [len(group) for group in second] == [1] * 6
    for index, traj in enumerate(trajs):  # each episode got its own sample of its own prompt
        prompt = TemplateRenderer(tokenizer, forced.stop_token_ids).prompt(tasks[index].prompt)
        assert traj.token_ids[: len(prompt)] == prompt
        assert traj.token_ids[len(prompt): len(prompt) + 1] == first[index // 3][index % 3].token_ids
