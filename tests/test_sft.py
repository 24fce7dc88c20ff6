"""`rlyard sft`: the data format, the rollout's tokens, learning, resume, the CLI, and RL from an SFT run.

Everything is real (the SmolLM2 tokenizer and chat template, transformers, peft); the model is
the tiny random llama of conftest, so each run takes a second or two on one CPU thread.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlyard.agent.loop import AgentLimits, TemplateRenderer, conversation_tokens, run_episodes
from rlyard.agent.toolcalls import parse_tool_calls
from rlyard.cli import main
from rlyard.config import ConfigError, ModelConfig, load_config
from rlyard.environment import StepResult
from rlyard.orchestrate.setup import build, initial_model, stop_tokens
from rlyard.sft import DataError, assistant_text, load_conversations
from rlyard.sft.batching import DataOrder, tokenize
from rlyard.sft.train import train_sft
from rlyard.types import Completion, Reward, SamplingParams, Task

READ_FILE = {"type": "function", "function": {"name": "read_file", "description": "Read a text file.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
BASH = {"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
TOOLS = [READ_FILE, BASH]


def openai_call(name: str, arguments: dict, id_: str = "call_1") -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def demo(k: int = 0, long_output: str = "") -> dict:
    """A tool-using episode in the OpenAI shape: read a file, run a command, answer."""
    return {"messages": [
        {"role": "system", "content": "You are an agent working in a folder of files."},
        {"role": "user", "content": f"What is the serial number of device {k}?"},
        {"role": "assistant", "content": None, "tool_calls": [openai_call("read_file", {"path": f"devices/{k}.txt"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": f"device {k}\nserial: SN-{k:04d}\n" + long_output},
        {"role": "assistant", "content": "Let me check the log too.", "tool_calls": [openai_call("bash", {"command": "tail -n 2 log.txt"})]},
        {"role": "tool", "content": "ok"},
        {"role": "user", "content": "Answer now."},
        {"role": "assistant", "content": f"The serial number is SN-{k:04d}."},
    ], "tools": TOOLS, "metadata": {"k": k}}


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


@pytest.fixture
def renderer(tokenizer):
    return TemplateRenderer(tokenizer, stop_tokens(tokenizer))


# --------------------------------------------------------------------------- tokens and loss mask
def test_the_loss_mask_covers_exactly_the_assistant_tokens(tokenizer, renderer, tmp_path):
    messages = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
                {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "6"},
                {"role": "user", "content": "Thanks."}]  # after the last reply: no loss, left out
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert renderer.reply_stop_id() == stop
    # by hand, from the tokenizer's pieces: the templated prompt, reply + stop (1), the text between (0), reply + stop (1)
    prompt = list(tokenizer.apply_chat_template(messages[:1], add_generation_prompt=True, tokenize=True, return_dict=False))
    first = tokenizer("4", add_special_tokens=False).input_ids + [stop]
    between = tokenizer("\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).input_ids
    second = tokenizer("6", add_special_tokens=False).input_ids + [stop]
    expected_ids = prompt + first + between + second
    expected_mask = [0] * len(prompt) + [1] * len(first) + [0] * len(between) + [1] * len(second)

    record = conversation_tokens(renderer, messages)
    assert record.token_ids == expected_ids and record.loss_mask == expected_mask
    trained = [t for t, m in zip(record.token_ids, record.loss_mask) if m]
    assert tokenizer.decode(trained) == "4<|im_end|>6<|im_end|>"
    # the same through the data file
    path = write_jsonl(tmp_path / "d.jsonl", [{"messages": messages}])
    [example] = tokenize(load_conversations(path), renderer, stop, AgentLimits(), 4096).examples
    assert example.token_ids == expected_ids and example.loss_mask == expected_mask and example.source == f"{path} line 1"


def test_openai_tool_calls_become_hermes_text_that_parses_back():
    calls = [openai_call("read_file", {"path": "a/ü.txt"}), openai_call("bash", {"command": "ls -la | head"}, "call_2")]
    text = assistant_text("Let me look.", calls)
    assert text == ('Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a/ü.txt"}}\n</tool_call>\n'
                    '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la | head"}}\n</tool_call>')
    parsed = parse_tool_calls(text, "hermes", TOOLS)
    assert parsed.ok and parsed.text == "Let me look."
    assert [(c.name, c.arguments) for c in parsed.calls] == [("read_file", {"path": "a/ü.txt"}), ("bash", {"command": "ls -la | head"})]
    only_call = assistant_text(None, [{"function": {"name": "bash", "arguments": {"command": "pwd"}}}])  # dict arguments, no type
    assert only_call.startswith("<tool_call>\n") and parse_tool_calls(only_call, "hermes").calls[0].arguments == {"command": "pwd"}


GOOD = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}


@pytest.mark.parametrize("row, expected", [
    ('{"messages": [', "line 3: not valid JSON"),
    ({"message": []}, "line 3: unknown field 'message'"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "line 3: messages[0].role 'bot' is not one of system, user, assistant, tool"),
    ({"messages": [{"role": "user", "content": "Hi"}]}, "line 3: no assistant message"),
    ({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]},
     "line 3: messages[1]: an assistant message must follow a user or tool message, not a system message"),
    ({"messages": [*GOOD["messages"], {"role": "assistant", "content": "again"}]},
     "line 3: messages[2]: an assistant message must follow a user or tool message, not an assistant message"),
    ({"messages": [{"role": "user", "content": ["parts"]}, {"role": "assistant", "content": "a"}]},
     "line 3: messages[0].content must be a string"),
    ({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "bash", "arguments": "{ls"}}]}]},
     "line 3: messages[1].tool_calls[0].function.arguments is not valid JSON"),
    ({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": None}]},
     "line 3: messages[1]: an assistant message needs content or tool_calls"),
    ({**GOOD, "tools": [{"type": "function", "function": {"description": "no name"}}]}, "line 3: tools[0]: a tool spec needs"),
])
def test_bad_rows_name_the_file_line_and_field(tmp_path, row, expected):
    path = write_jsonl(tmp_path / "demos.jsonl", [GOOD, "", row])
    with pytest.raises(DataError) as info:
        load_conversations(path)
    assert str(info.value).startswith(f"{path} line 3: ") and expected in str(info.value)


def test_a_reply_holding_the_stop_token_is_refused(renderer, tmp_path):
    path = write_jsonl(tmp_path / "demos.jsonl", [{"messages": [{"role": "user", "content": "u"},
                                                                {"role": "assistant", "content": "done<|im_end|>"}]}])
    with pytest.raises(DataError, match=r"demos.jsonl line 1: messages\[1\].content contains the stop token '<\|im_end\|>'"):
        tokenize(load_conversations(path), renderer, 2, AgentLimits(), 4096)


# --------------------------------------------------------------------------- SFT sees what RL sees
class ScriptedEngine:
    """Writes the demonstration's replies, as tokens, with the stop token the engine would sample;
    like an engine, at most `max_new_tokens` of them (finish "length" when it cuts)."""

    policy_version = 0

    def __init__(self, tokenizer, replies: list[str], stop: int):
        self.turns = [tokenizer(reply, add_special_tokens=False).input_ids + [stop] for reply in replies]

    def generate(self, prompts, params, n=1):
        tokens = self.turns.pop(0)
        kept = tokens[:params.max_new_tokens]
        return [[Completion(kept, [-0.5] * len(kept), "stop" if kept == tokens else "length", 0)] for _ in prompts]


class ScriptedEnv:
    """Answers each reply with the demonstration's next messages; done after the last reply."""

    def __init__(self, messages: list[dict]):
        self.messages, self.replies = messages, [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        self.turn = 0

    def reset(self, task):
        return self.messages[: self.replies[0]]

    def step(self, reply):
        assert reply == self.messages[self.replies[self.turn]]["content"]  # the text the env parses is the demo's
        self.turn += 1
        if self.turn == len(self.replies):
            return StepResult(done=True, reason="submitted")
        return StepResult(messages=self.messages[self.replies[self.turn - 1] + 1: self.replies[self.turn]], done=False)

    def score(self):
        return Reward(value=1.0)

    def close(self):
        pass


def test_a_conversation_tokenises_as_run_episodes_records_it(tokenizer, renderer, tmp_path):
    limits = AgentLimits(max_turns=8, max_tokens_per_turn=512, max_total_tokens=100_000, tool_output_chars=120)
    [conversation] = load_conversations(write_jsonl(tmp_path / "demos.jsonl", [demo(7, long_output="x" * 500)]))
    messages, stop = conversation.messages, renderer.reply_stop_id()
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    params = SamplingParams(max_new_tokens=512, stop_token_ids=stop_tokens(tokenizer))
    [traj] = run_episodes(ScriptedEngine(tokenizer, replies, stop), tokenizer, [ScriptedEnv(messages)],
                          [Task(id="t", prompt=[], env="scripted")], ["g"], params, limits, tools=TOOLS)
    assert traj.finish_reason == "submitted" and traj.turns == 3
    record = conversation_tokens(renderer, messages, TOOLS, stop, limits)
    assert record.token_ids == traj.token_ids and record.loss_mask == traj.loss_mask
    [example] = tokenize([conversation], renderer, stop, limits, 100_000).examples
    assert example.token_ids == traj.token_ids and example.loss_mask == traj.loss_mask
    assert "characters cut" in tokenizer.decode(traj.token_ids)  # the long tool output was cut, the same way in both


LONG_TASK = " Background: " + "the devices sit in racks along the wall. " * 40  # a 398-token first prompt


@pytest.mark.parametrize("limits, ends", [
    # 400 total, 64 a turn: the default prompt limit (400 - 64 = 336) cuts the task's middle, the budget the 2nd reply
    (AgentLimits(max_total_tokens=400, max_tokens_per_turn=64), "token_budget"),
    (AgentLimits(max_total_tokens=300, max_prompt_tokens=1000), "prompt_too_long"),  # a prompt over the budget: never sampled
    (AgentLimits(max_total_tokens=100_000, max_tokens_per_turn=40), "turn_token_limit"),  # the 44-token 2nd reply
    (AgentLimits(max_total_tokens=100_000, max_tokens_per_turn=512, max_turns=2), "turn_limit"),
    (AgentLimits(max_total_tokens=450, max_prompt_tokens=1000), "token_budget"),  # 398 + 35 + 23 tool tokens >= 450
])
def test_a_long_conversation_is_cut_where_run_episodes_would_end_it(tokenizer, renderer, tmp_path, limits, ends):
    """SFT keeps exactly what an episode under the same agent.* limits would hold (issue 37, item 2)."""
    row = demo(7)
    row["messages"][1]["content"] += LONG_TASK
    [conversation] = load_conversations(write_jsonl(tmp_path / "demos.jsonl", [row]))
    messages, stop = conversation.messages, renderer.reply_stop_id()
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    params = SamplingParams(max_new_tokens=512, stop_token_ids=stop_tokens(tokenizer))
    [traj] = run_episodes(ScriptedEngine(tokenizer, replies, stop), tokenizer, [ScriptedEnv(messages)],
                          [Task(id="t", prompt=[], env="scripted")], ["g"], params, limits, tools=TOOLS)
    assert traj.finish_reason == ends
    tokenized = tokenize([conversation], renderer, stop, limits, 100_000)
    assert tokenized.ended == {ends: 1}
    if ends == "prompt_too_long":  # nothing sampled, nothing trained
        assert not any(traj.loss_mask) and tokenized.examples == [] and tokenized.dropped == 1
        return
    [example] = tokenized.examples
    assert example.token_ids == traj.token_ids and example.loss_mask == traj.loss_mask
    assert len(example.token_ids) <= limits.max_total_tokens


def test_sft_cuts_the_first_prompt_at_the_default_prompt_limit(tokenizer, renderer, tmp_path):
    """`rlyard sft` reads agent.* as the rollout does: agent.max_prompt_tokens unset, the first prompt is
    cut to max_total_tokens less one reply (400 - 64 = 336 tokens), not kept whole (398 tokens)."""
    from rlyard.sft.train import prepare_data

    row = demo(7)
    row["messages"][1]["content"] += LONG_TASK
    path = write_jsonl(tmp_path / "demos.jsonl", [row, demo(1)])
    config = load_config(None, [f"sft.data={path}", "sft.eval_fraction=0", "env.name=files", "agent.max_total_tokens=400",
                                "agent.max_tokens_per_turn=64"])
    data = prepare_data(config, renderer, renderer.reply_stop_id())
    example = next(e for e in data.train.examples if e.source.endswith("line 1"))
    prompt = example.loss_mask.index(1)
    assert prompt <= 336 and "characters cut" in tokenizer.decode(example.token_ids[:prompt])
    assert len(example.token_ids) <= 400 and data.train.ended == {"token_budget": 1}


def test_a_single_turn_family_keeps_its_reply_up_to_rollout_max_new_tokens(tokenizer, renderer, tmp_path):
    """A single-turn family samples one reply of rollout.max_new_tokens after its whole prompt; the
    agent loop's agent.* limits (128 tokens a turn by default) never apply to it, so SFT keeps a
    reply of over 128 tokens whole under max_new_tokens 256 and cuts it at 64 under max_new_tokens 64."""
    from rlyard.sft.train import prepare_data

    reply = " ".join(f"bar{i}" for i in range(60))
    row = {"messages": [{"role": "user", "content": "Write a tune." + LONG_TASK}, {"role": "assistant", "content": reply}]}
    path = write_jsonl(tmp_path / "demos.jsonl", [row])
    for max_new, ended in ((256, {}), (64, {"turn_token_limit": 1})):
        config = load_config(None, [f"sft.data={path}", "sft.eval_fraction=0", "env.name=arith", f"rollout.max_new_tokens={max_new}",
                                    "agent.max_total_tokens=300", "agent.max_tokens_per_turn=32"])
        data = prepare_data(config, renderer, renderer.reply_stop_id())
        [example] = data.train.examples
        trained = sum(example.loss_mask)
        assert (trained > 128) if max_new == 256 else (trained <= 64), trained
        assert "characters cut" not in tokenizer.decode(example.token_ids)  # the whole prompt, whatever agent.* says
        assert {k: v for k, v in data.train.ended.items() if k != "done"} == ended, data.train.ended


def test_the_data_order_is_a_function_of_seed_and_step():
    lengths = [5, 50, 7, 30, 12, 9, 44, 3, 21, 18]
    order = DataOrder(lengths, batch_size=4, micro_batch_size=2, window=2, seed=3)
    assert order.steps_per_epoch == 3  # 5 micro-batches of 2, 2 a step
    epoch = [i for step in range(3) for micro in order.step(step) for i in micro]
    assert sorted(epoch) == list(range(10))  # every conversation once an epoch
    again = DataOrder(lengths, 4, 2, 2, 3)
    assert [again.step(s) for s in (4, 1, 0)] == [order.step(s) for s in (4, 1, 0)]
    assert order.step(3) != order.step(0) or order.step(4) != order.step(1)  # the next epoch is reshuffled


# --------------------------------------------------------------------------- training runs
def sft_overrides(model_dir: Path, run_dir: Path, *more: str) -> list[str]:
    return [f"model.name={model_dir}", f"output.run_dir={run_dir}", "output.progress=false", "output.plot=false",
            "sft.batch_size=2", "sft.micro_batch_size=2", "sft.warmup_steps=0", *more]


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    """Two distinct conversations, each repeated: a model that learns them lowers any held-out copy's loss."""
    folder = tmp_path_factory.mktemp("demos")
    write_jsonl(folder / "held_out.jsonl", [demo(1), demo(2)])
    return write_jsonl(folder / "demos.jsonl", [demo(1), demo(2)] * 4)


def test_sft_lowers_the_held_out_loss(demos, tiny_model_dir, tmp_path, capsys):
    """Full fine-tuning: a LoRA adapter moves the tiny random llama's loss only slowly (10.8 -> 10.4 in 20 steps)."""
    run_dir = tmp_path / "run"
    code = main(["sft", str(demos), *sft_overrides(tiny_model_dir, run_dir, f"sft.eval_data={demos.parent / 'held_out.jsonl'}",
                                                    "model.lora.enabled=false", "sft.steps=20", "sft.lr=1e-2", "sft.eval_every=10",
                                                    "output.plot=true")])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    held = {row["step"]: row["eval/loss"] for row in rows if "eval/loss" in row}
    assert sorted(held) == [0, 10, 20]
    print(f"held-out loss {held[0]:.3f} -> {held[10]:.3f} -> {held[20]:.3f}")
    assert held[20] < 0.5 * held[0] and held[20] < held[10]  # a random tiny model starts near ln(vocab), about 10.8
    train = [row["loss/train"] for row in rows if "loss/train" in row]
    assert len(train) == 20 and train[-1] < 0.5 * train[0]
    assert f"[rlyard] run folder: {run_dir}" in out and f"held-out loss: {held[0]:.4f} -> {held[20]:.4f}" in out
    assert "step 10/20: train loss" in out
    assert (run_dir / "config.yaml").exists() and (run_dir / "loss_curve.png").exists()
    assert (run_dir / "checkpoints" / "step_000020" / "weights.pt").exists()


def test_a_stopped_run_resumes_to_the_same_weights_and_metrics(demos, tiny_model_dir, tmp_path, monkeypatch):
    import rlyard.sft.train as sft_train

    def config(run_dir):
        return load_config(None, [f"sft.data={demos}", *sft_overrides(tiny_model_dir, run_dir, "sft.steps=6", "sft.lr=1e-2",
                                                                         "sft.batch_size=4", "output.checkpoint_every=2", "sft.eval_every=3")])

    whole = train_sft(config(tmp_path / "whole"), tmp_path / "whole")
    save = sft_train.save_checkpoint

    def killed_at_step_4(run_dir, step, *args, **kwargs):
        if step == 4:  # step 4 is logged, its checkpoint never written: resume goes back to step 2
            raise KeyboardInterrupt
        return save(run_dir, step, *args, **kwargs)

    monkeypatch.setattr(sft_train, "save_checkpoint", killed_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        train_sft(config(tmp_path / "stopped"), tmp_path / "stopped")
    monkeypatch.setattr(sft_train, "save_checkpoint", save)
    assert main(["sft", "--resume", str(tmp_path / "stopped")]) == 0

    def rows(run_dir):
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines]

    assert [row["step"] for row in rows(tmp_path / "stopped")] == [0, 1, 2, 3, 4, 5, 6]
    assert rows(tmp_path / "stopped") == rows(tmp_path / "whole")
    weights = [torch.load(run / "checkpoints" / "step_000006" / "weights.pt") for run in (tmp_path / "whole", tmp_path / "stopped")]
    assert weights[0].keys() == weights[1].keys() and all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert whole.final_eval_loss is not None and whole.steps == 6


def test_sft_help_shows_examples(capsys):
    with pytest.raises(SystemExit) as info:
        main(["sft", "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert "rlyard sft demos.jsonl" in out and "--resume" in out and "model.init_from=" in out and "sft.epochs=2" in out


def test_cli_errors_are_one_line(demos, tiny_model_dir, tmp_path, capsys):
    bad = write_jsonl(tmp_path / "bad.jsonl", [GOOD, {"messages": [{"role": "bot", "content": "x"}]}])
    assert main(["sft", str(bad), *sft_overrides(tiny_model_dir, tmp_path / "run")]) == 2
    assert capsys.readouterr().err.startswith(f"rlyard: {bad} line 2: messages[0].role 'bot'")
    assert main(["sft", "sft.epochs=2"]) == 2 and "sft.data: no conversations given" in capsys.readouterr().err
    assert main(["sft", str(demos), "sft.micro_batch_size=3"]) == 2
    assert "sft.micro_batch_size: must divide sft.batch_size (8)" in capsys.readouterr().err
    assert main(["sft", str(demos), "--print-config"]) == 0 and f"data: {demos}" in capsys.readouterr().out


# --------------------------------------------------------------------------- RL from an SFT run
@pytest.mark.parametrize("lora, last_layers", [(True, None), (True, 1), (False, None)], ids=["lora", "lora-last-layer", "full"])
def test_rl_starts_from_the_sft_weights_and_trains(demos, tiny_model_dir, tmp_path, lora, last_layers):
    from rlyard.models import add_lora, load_model
    from rlyard.models.lora import load_trainable_state_dict
    from rlyard.orchestrate.entry import train

    sft_dir = tmp_path / "sft"
    layers = [f"model.lora.last_layers={last_layers}"] if last_layers else []
    train_sft(load_config(None, [f"sft.data={demos}", *sft_overrides(tiny_model_dir, sft_dir, "sft.steps=2", "sft.lr=5e-2",
                                                                      f"model.lora.enabled={str(lora).lower()}", *layers)]), sft_dir)
    weights = torch.load(sft_dir / "checkpoints" / "step_000002" / "weights.pt")
    if last_layers:  # the tiny model has 2 layers: the adapter is in layer 1 only, and layer 0 is the base's
        assert weights and all(".layers.1." in name for name in weights)
    # the SFT policy, rebuilt by hand from its checkpoint
    expected = load_model(str(tiny_model_dir))
    if lora:
        expected = add_lora(expected, 16, 32, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                            last_layers)
    load_trainable_state_dict(expected, weights)
    expected = expected.merge_and_unload() if lora else expected

    rl_dir = tmp_path / "rl"
    config = load_config(None, [f"model.name={tiny_model_dir}", f"model.init_from={sft_dir}", "env.name=toy", "env.train_size=4",
                                "rollout.prompts_per_step=1", "rollout.n=4", "rollout.max_new_tokens=4", "train.steps=1",
                                "eval.size=0", "output.progress=false", "output.plot=false", f"output.run_dir={rl_dir}"])
    c = build(config)
    base = load_model(str(tiny_model_dir)).state_dict()
    start = c.engine.model.state_dict()
    changed = [k for k, v in expected.state_dict().items() if not torch.equal(v, base[k])]
    assert not last_layers or all(".layers.1." in k for k in changed)
    assert changed and all(torch.allclose(start[k], expected.state_dict()[k], atol=1e-6) for k in changed)
    ids = torch.tensor([[1, 5, 9, 200, 7, 42]])
    with torch.no_grad():
        assert torch.allclose(c.model(ids).logits, expected(ids).logits, atol=1e-4)  # the fresh adapter starts at zero
    result = train(config, rl_dir)
    rows = [json.loads(line) for line in (rl_dir / "metrics.jsonl").read_text().splitlines()]
    assert result.steps == 1 and [row["step"] for row in rows] == [1] and "loss/policy" in rows[0]
    chained = initial_model(ModelConfig(name=str(tiny_model_dir), init_from=str(rl_dir)))  # SFT -> RL -> the next run
    assert chained.state_dict().keys() == base.keys()


def test_init_from_names_what_is_wrong(tmp_path, demos, tiny_model_dir):
    with pytest.raises(ConfigError, match="model.init_from: no checkpoint in"):
        initial_model(ModelConfig(name=str(tiny_model_dir), init_from=str(tmp_path / "nothing")))
    run = tmp_path / "sft"
    train_sft(load_config(None, [f"sft.data={demos}", *sft_overrides(tiny_model_dir, run, "sft.steps=1")]), run)
    with pytest.raises(ConfigError, match=f"was trained from model.name={tiny_model_dir}, this run has model.name=embedded"):
        initial_model(ModelConfig(name="embedded", init_from=str(run)))
    with pytest.raises(ConfigError, match="model.lora.last_layers=3: the model has 2 decoder layers"):
        train_sft(load_config(None, [f"sft.data={demos}", *sft_overrides(tiny_model_dir, tmp_path / "deep", "model.lora.last_layers=3")]),
                  tmp_path / "deep")
