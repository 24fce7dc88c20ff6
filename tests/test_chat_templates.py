"""Any Hugging Face chat model with its own chat template: tiny random models built from the configs
of four families (llama, qwen2, qwen3, phi3) with real tokenizers and real chat templates
(tests/data/templates/README.md says where each comes from).

The agent loop keeps every sampled token as sampled, and what it did not sample is the template's
own text around the replies; the SFT tokenisation (`conversation_tokens`) builds the same lists;
the tool-call format comes from the template (Hermes for Qwen, Llama 3 JSON for Llama 3.1) unless
`agent.tool_format` says otherwise; Qwen3, whose template re-renders history, is handled as
docs/models.md says.
"""
from __future__ import annotations

import json
import lzma
import os
import random
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from rlyard.agent.loop import AgentLimits, TemplateRenderer, conversation_tokens, run_episodes
from rlyard.agent.toolcalls import parse_tool_calls, render_tool_specs
from rlyard.engines import HFEngine
from rlyard.envs import get_family
from rlyard.environment import StepResult
from rlyard.models import load_tokenizer
from rlyard.models.templates import choose_tool_format, read_chat_template, render, template_tool_format
from rlyard.types import Completion, Reward, SamplingParams, Task

DATA = Path(__file__).parent / "data" / "templates"
LLAMA3_SPECIALS = ["<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>"]
BASH = {"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


# --------------------------------------------------------------------------- tokenizers and models
@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """The committed tokenizers as HF folders (tokenizer.json is stored xz-compressed)."""
    root = tmp_path_factory.mktemp("tokenizers")
    out = {}
    for name in ("qwen3", "phi3"):
        dest = root / name
        dest.mkdir()
        for file in (DATA / name).iterdir():
            if file.suffix == ".xz":
                (dest / file.stem).write_bytes(lzma.decompress(file.read_bytes()))
            else:
                shutil.copy(file, dest / file.name)
        out[name] = dest
    return out


def llama3_tokenizer():
    """The Llama 3.1 template over SmolLM2's (real, llama-family) vocabulary plus Llama 3's header and
    turn tokens: Meta's tokenizer is not committed here (README.md); the template is the real one.
    RLYARD_LLAMA3_TOKENIZER=<folder> runs these tests on a real Llama 3 tokenizer instead."""
    if os.environ.get("RLYARD_LLAMA3_TOKENIZER"):
        return load_tokenizer(os.environ["RLYARD_LLAMA3_TOKENIZER"], str(DATA / "llama-3.1-instruct.jinja"))
    tokenizer = load_tokenizer("embedded", str(DATA / "llama-3.1-instruct.jinja"))
    tokenizer.add_special_tokens({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                                  "additional_special_tokens": LLAMA3_SPECIALS})
    return tokenizer


def first_word_sentencepiece(tokenizer):
    """The tokenizer, marking only the first word of a text with the word-start piece (as Llama 2 and
    Mistral tokenizers with legacy=False do; Phi-3's marks every text after a special token)."""
    from tokenizers import normalizers, pre_tokenizers

    tokenizer.backend_tokenizer.normalizer = normalizers.Replace(" ", "\u2581")
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace("\u2581", prepend_scheme="first", split=False)
    return tokenizer


@pytest.fixture(scope="module")
def tokenizers(folders) -> dict[str, object]:
    return {
        "smollm2": load_tokenizer("embedded"),  # llama config, its own template (no tools)
        "qwen3": load_tokenizer(str(folders["qwen3"])),  # its own template: chat_template.jinja in the folder
        "qwen2.5": load_tokenizer(str(folders["qwen3"]), str(DATA / "qwen2.5-instruct.jinja")),  # same vocabulary
        "llama3.1": llama3_tokenizer(),
        "phi3": load_tokenizer(str(folders["phi3"])),
        "phi3-first": first_word_sentencepiece(load_tokenizer(str(folders["phi3"]))),
    }


CONFIGS = {"smollm2": "llama", "qwen3": "qwen3", "qwen2.5": "qwen2", "llama3.1": "llama", "phi3": "phi3", "phi3-first": "phi3"}
FAMILIES = list(CONFIGS)


def tiny_model(model_type: str, tokenizer, end_of_message: int):
    """A 2-layer random model of the family; its head's bias on the end-of-message token makes about
    one token in four end the turn, so episodes go on for several turns by themselves."""
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                  max_position_embeddings=4096, tie_word_embeddings=False,
                                  pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    head = torch.nn.Linear(32, len(tokenizer), bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[end_of_message] = float(torch.tensor(len(tokenizer) / 3).log())
    model.lm_head = head
    return model


class RecordingEngine(HFEngine):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def generate(self, prompts, params, n=1):
        out = super().generate(prompts, params, n)
        self.calls.append(out)
        return out


class ScriptedEngine:
    """Writes the given replies (texts, tokenised alone, or token lists), each ending with the
    template's end of message."""

    policy_version = 0

    def __init__(self, renderer: TemplateRenderer, replies: list[str] | list[list[int]]):
        self.turns = [r if isinstance(r, list) else renderer.encode(r) + [renderer.reply_stop_id()] for r in replies]
        self.prompts = []

    def generate(self, prompts, params, n=1):
        self.prompts.append(list(prompts[0]))  # the episode goes on growing that list
        tokens = self.turns.pop(0)
        return [[Completion(list(tokens), [-0.5] * len(tokens), "stop", 0)] for _ in prompts]


class ScriptedEnv:
    """Answers reply k with `answers[k]`; done after the last answer. Remembers what it read."""

    def __init__(self, prompt: list[dict], answers: list[list[dict]]):
        self.prompt, self.answers, self.read = prompt, answers, []

    def reset(self, task):
        return list(self.prompt)

    def step(self, reply):
        self.read.append(reply)
        if len(self.read) > len(self.answers):
            return StepResult(done=True, reason="submitted")
        return StepResult(messages=self.answers[len(self.read) - 1], done=False)

    def score(self):
        return Reward(value=1.0)

    def close(self):
        pass


def sampled_runs(traj) -> list[list[int]]:
    runs, current = [], []
    for token, mask in zip(traj.token_ids, traj.loss_mask):
        if mask:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


def unsampled_runs(traj) -> list[list[int]]:
    return sampled_runs(replace(traj, loss_mask=[1 - m for m in traj.loss_mask]))


def template_pieces(renderer: TemplateRenderer, messages: list[dict], tools) -> list[str]:
    """The template's own text around the replies of `messages`: the conversation rendered with reply k
    replaced by a marker (and one more message after the last reply, so that none is the final one),
    cut at the markers: [the first prompt, the end of reply 1 + what followed + the header, ...]."""
    marked, marks = [], []
    for message in renderer.as_shown(messages):  # tool messages as user ones where the template drops them
        if message["role"] == "assistant":
            marks.append(f"RLYARDREPLY{len(marks)}X")
            message = {**message, "content": marks[-1]}
        marked.append(message)
    text = render(renderer.tokenizer, marked + [{"role": renderer.tool_role, "content": "more"}], tools, generation=True)
    pieces = []
    for mark in marks:
        head, text = text.split(mark, 1)
        pieces.append(head)
    return pieces


def assert_template_text_around_replies(renderer, traj, messages, tools):
    """Every token the policy did not sample is the template's text for the conversation."""
    pieces, runs = template_pieces(renderer, messages, tools), unsampled_runs(traj)
    assert len(runs) == len(pieces)
    assert runs[0] == renderer.encode(pieces[0])  # the first prompt
    for run, piece in zip(runs[1:], pieces[1:]):
        assert piece.startswith(renderer.end_text)  # each reply ended on the template's end of message
        assert run == renderer.encode_after_reply(piece[len(renderer.end_text):])


# --------------------------------------------------------------------------- loading and detection
def test_the_chat_template_override_reads_a_file_text_or_json_and_fails_clearly(folders, tmp_path):
    source = (DATA / "qwen2.5-instruct.jinja").read_text()
    assert read_chat_template(str(DATA / "qwen2.5-instruct.jinja")) == source
    assert read_chat_template(source) == source
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": source}))
    assert read_chat_template(str(tmp_path / "tokenizer_config.json")) == source
    tokenizer = load_tokenizer(str(folders["qwen3"]), source)
    assert tokenizer.chat_template == source and template_tool_format(tokenizer) == "hermes"
    with pytest.raises(FileNotFoundError, match=r"model.chat_template: no file '.*missing.jinja'"):
        load_tokenizer("embedded", str(tmp_path / "missing.jinja"))
    with pytest.raises(ValueError, match="model.chat_template does not render a user message"):
        load_tokenizer("embedded", "{% for m in messages %}{{ m.content | nosuchfilter }}{% endfor %}")


@pytest.mark.parametrize("name, end, tool_role, thinks, fmt", [
    ("smollm2", "<|im_end|>", "tool", False, None),
    ("qwen3", "<|im_end|>", "tool", True, "hermes"),
    ("qwen2.5", "<|im_end|>", "tool", False, "hermes"),
    ("llama3.1", "<|eot_id|>", "tool", False, "llama3_json"),
    ("phi3", "<|end|>", "user", False, None),  # Phi-3.5's template drops tool messages: they go as user ones
])
def test_what_each_template_does_is_found_by_rendering_it(tokenizers, name, end, tool_role, thinks, fmt):
    tokenizer = tokenizers[name]
    renderer = TemplateRenderer(tokenizer, (tokenizer.eos_token_id,))
    assert renderer.end_text == end and renderer.reply_stop_id() == tokenizer.convert_tokens_to_ids(end)
    assert renderer.reply_stop_id() in renderer.stop_token_ids  # Phi-3's <|end|> is not its eos: added
    assert (renderer.tool_role, renderer.thinks, template_tool_format(tokenizer)) == (tool_role, thinks, fmt)
    assert choose_tool_format("auto", tokenizer) == ((fmt, True) if fmt else (None, False))
    assert choose_tool_format("family", tokenizer) == (None, False)
    assert choose_tool_format("hermes", tokenizer) == ("hermes", fmt == "hermes")
    assert choose_tool_format("bash_block", tokenizer) == ("bash_block", False)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."}]
    assert renderer.prompt(messages) == list(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                                           tokenize=True, return_dict=False))


# --------------------------------------------------------------------------- episodes of tiny random models
class EchoEnv:
    """Answers every reply with a tool message; done after `turns` replies."""

    def __init__(self, turns: int):
        self.turns, self.sent = turns, []

    def reset(self, task):
        self.sent = []
        return list(task.prompt)

    def step(self, reply):
        if len(self.sent) + 1 >= self.turns:
            return StepResult(done=True, reason="submitted")
        self.sent.append([{"role": "tool", "content": f"output {len(self.sent) + 1}:\nfile.txt"}])
        return StepResult(messages=self.sent[-1], done=False)

    def score(self):
        return Reward(value=1.0)

    def close(self):
        pass


@pytest.mark.parametrize("name", FAMILIES)
def test_a_tiny_random_model_episode_keeps_its_samples_and_the_templates_text(tokenizers, name):
    tokenizer = tokenizers[name]
    renderer = TemplateRenderer(tokenizer, (tokenizer.eos_token_id,))
    engine = RecordingEngine(tiny_model(CONFIGS[name], tokenizer, renderer.reply_stop_id()), tokenizer.pad_token_id)
    tools = [BASH] if template_tool_format(tokenizer) else None
    prompts = [[{"role": "system", "content": "You are an agent."}, {"role": "user", "content": f"List the files of {d}."}]
               for d in ("a", "b")]
    tasks = [Task(id=f"t{i}", prompt=prompt, env="echo") for i, prompt in enumerate(prompts)]
    envs = [EchoEnv(turns=4), EchoEnv(turns=3)]  # the second ends first: in every call, episode i is row i
    params = SamplingParams(temperature=1.0, max_new_tokens=24, stop_token_ids=(tokenizer.eos_token_id,), seed=0)
    limits = AgentLimits(max_turns=6, max_tokens_per_turn=24, max_total_tokens=4000)
    trajs = run_episodes(engine, tokenizer, envs, tasks, ["g", "g"], params, limits, tools=tools)
    for index, (traj, env) in enumerate(zip(trajs, envs)):
        assert traj.finish_reason == "submitted" and traj.turns == env.turns
        # every reply is exactly what the engine sampled, with its logprobs
        samples = [call[index][0] for call in engine.calls[: env.turns]]
        assert sampled_runs(traj) == [s.token_ids for s in samples]
        assert [lp for lp, m in zip(traj.behaviour_logprobs, traj.loss_mask) if m] == [lp for s in samples for lp in s.logprobs]
        assert all(s.token_ids[-1] == renderer.reply_stop_id() for s in samples)  # each turn ended on its own
        # everything else is the template's text around the replies
        replies = [{"role": "assistant", "content": tokenizer.decode(s.token_ids[:-1], skip_special_tokens=False,
                                                                     clean_up_tokenization_spaces=False)} for s in samples]
        conversation = list(prompts[index])
        for turn, reply in enumerate(replies):
            conversation += [reply, *(env.sent[turn] if turn < len(env.sent) else [])]
        assert_template_text_around_replies(renderer, traj, conversation, tools)
        # Llama 3.1 trims each message: a random reply with spaces at its ends re-renders otherwise
        drift = name == "llama3.1" and any(r["content"] != r["content"].strip() for r in replies[:-1])
        assert ("template_mismatch" in traj.components) == drift


# --------------------------------------------------------------------------- SFT tokenises as the loop records
CALLS = {"hermes": '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>',
         "llama3_json": '{"name": "bash", "parameters": {"command": "ls"}}'}


@pytest.mark.parametrize("name", FAMILIES)
def test_sft_tokenises_a_conversation_as_the_loop_records_it(tokenizers, name):
    tokenizer = tokenizers[name]
    renderer = TemplateRenderer(tokenizer, (tokenizer.eos_token_id,))
    fmt = template_tool_format(tokenizer) or "hermes"
    tools = [BASH] if template_tool_format(tokenizer) else None
    system = "You are an agent." + ("" if tools else "\n\n" + render_tool_specs([BASH], fmt))
    think = "<think>\nThe files first.\n</think>\n\n" if renderer.thinks else ""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "How many files?"},
                {"role": "assistant", "content": f"{think}I will look.\n{CALLS[fmt]}" if fmt == "hermes" else CALLS[fmt]},
                {"role": "tool", "content": "a.txt\nb.txt"},
                {"role": "assistant", "content": f"{think}There are 2 files."}]
    record = conversation_tokens(renderer, messages, tools)
    env = ScriptedEnv(messages[:2], [messages[3:4]])  # the policy writes the replies' tokens as SFT has them
    [traj] = run_episodes(ScriptedEngine(renderer, sampled_runs(record)), tokenizer, [env], [Task(id="t", prompt=[], env="s")],
                          ["g"], SamplingParams(stop_token_ids=(tokenizer.eos_token_id,)), AgentLimits(), tools=tools)
    assert traj.finish_reason == "submitted" and "template_mismatch" not in traj.components
    assert record.token_ids == traj.token_ids and record.loss_mask == traj.loss_mask
    assert_template_text_around_replies(renderer, traj, messages, tools)
    # all of it is the template's text of the conversation, and but for where a prompt ends (tokenised
    # alone, as at inference: the SmolLM2 vocabulary writes a final "\n\n" as one token, "\n\n{" as
    # three) the tokens of apply_chat_template(tokenize=True), Phi-3's sentencepiece ones included
    whole = render(tokenizer, renderer.as_shown(messages), tools)
    if not name.startswith("phi3"):  # a sentencepiece decode adds spaces after special tokens
        assert whole.startswith(tokenizer.decode(traj.token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
    if name != "llama3.1":
        assert traj.token_ids == renderer.encode(whole)[: len(traj.token_ids)]
    call = parse_tool_calls(env.read[0], fmt, [BASH])
    assert [(c.name, c.arguments) for c in call.calls] == [("bash", {"command": "ls"})]
    if renderer.thinks:  # the environment reads the reply after its thinking
        assert env.read == ["I will look.\n" + CALLS["hermes"], "There are 2 files."]
        # over tool turns Qwen3's template keeps each reply's reasoning: the tokens are its rendering
        assert "The files first." in render(tokenizer, messages, tools)


# --------------------------------------------------------------------------- Qwen3: a template that re-renders history
def test_qwen3_after_a_new_user_message_keeps_what_the_policy_saw(tokenizers):
    """Qwen3's template drops the reasoning of replies before the last user message. The tokens of
    the first reply stay as sampled (reasoning included), the user message is the template's text
    after it, and the trajectory says the template would render the history otherwise."""
    tokenizer = tokenizers["qwen3"]
    renderer = TemplateRenderer(tokenizer, (tokenizer.eos_token_id,))
    first, second = "<think>\nSmall sums are easy.\n</think>\n\n4", "<think>\nStill 4.\n</think>\n\nYes: 4."
    messages = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": first},
                {"role": "user", "content": "Are you sure?"}, {"role": "assistant", "content": second}]
    engine = ScriptedEngine(renderer, [first, second])
    env = ScriptedEnv(messages[:1], [messages[2:3]])
    [traj] = run_episodes(engine, tokenizer, [env], [Task(id="t", prompt=[], env="s")], ["g"],
                          SamplingParams(stop_token_ids=(tokenizer.eos_token_id,)))
    assert traj.components["template_mismatch"] == 1.0
    seen = tokenizer.decode(engine.prompts[1], skip_special_tokens=False)  # what the policy saw for its 2nd reply
    assert seen == render(tokenizer, messages[:1], generation=True) + first + "<|im_end|>\n<|im_start|>user\nAre you sure?<|im_end|>\n<|im_start|>assistant\n"
    assert traj.token_ids[: len(engine.prompts[1])] == engine.prompts[1]  # the learner sees the same
    assert "Small sums" in seen and "Small sums" not in render(tokenizer, messages, generation=False)
    assert_template_text_around_replies(renderer, traj, messages, None)  # all that was not sampled: the template's
    record = conversation_tokens(renderer, messages)
    assert record.token_ids == traj.token_ids and record.loss_mask == traj.loss_mask
    assert env.read == ["4", "Yes: 4."]


@pytest.mark.parametrize("name", ["qwen3", "phi3"])
def test_a_serve_session_goes_on_in_its_tokens_with_these_templates(tokenizers, name):
    """`rlyard serve` continues a recorded session with the same bridge (it raised on Qwen3's template)."""
    from rlyard.serve.sessions import Session

    tokenizer = tokenizers[name]
    renderer = TemplateRenderer(tokenizer, (tokenizer.eos_token_id,))
    session, messages = Session("s"), [{"role": "user", "content": "List the files."}]
    first = session.plan_chat(renderer, messages, "", renderer.reply_stop_id())
    reply = renderer.encode("ls") + [renderer.reply_stop_id()]
    session.record(first, reply, [-0.5] * len(reply), 0, {"temperature": 1.0}, "stop", "ls")
    follow = [*messages, {"role": "assistant", "content": "ls"}, {"role": "tool", "content": "a.txt"}]
    second = session.plan_chat(renderer, follow, "", renderer.reply_stop_id())
    assert second.segment is session.segments[0] and second.prompt[: len(first.prompt) + len(reply)] == first.prompt + reply
    assert second.added == renderer.after_reply(follow[2:], follow[:2])


# --------------------------------------------------------------------------- the tool format, end to end
def oracle_replies(task: Task, fmt: str, think: bool) -> list[str]:
    """The files oracle's Hermes replies, written in `fmt`."""
    replies = get_family("files").oracle(task, random.Random(0))
    if fmt == "llama3_json":
        calls = [parse_tool_calls(r, "hermes").calls for r in replies]
        replies = ["; ".join(json.dumps({"name": c.name, "parameters": c.arguments}) for c in cs) for cs in calls]
    return [f"<think>\nNext step.\n</think>\n\n{r}" if think else r for r in replies]


@pytest.mark.parametrize("name, setting, fmt, template_writes", [
    ("llama3.1", "auto", "llama3_json", True),  # the template's own format and tool instructions
    ("qwen3", "auto", "hermes", True),
    ("smollm2", "auto", "hermes", False),  # SmolLM2's template renders no tools: the family's format
    ("smollm2", "llama3_json", "llama3_json", False),  # forced: the environment writes the instructions
    ("llama3.1", "family", "hermes", False),
])
def test_the_files_family_in_the_format_agent_tool_format_chooses(tokenizers, name, setting, fmt, template_writes):
    tokenizer = tokenizers[name]
    renderer = TemplateRenderer(tokenizer, (tokenizer.eos_token_id,))
    task = get_family("files").make_tasks("train", 1, seed=5)[0]
    engine = ScriptedEngine(renderer, oracle_replies(task, fmt, renderer.thinks))
    env = get_family("files").make_env()
    [traj] = run_episodes(engine, tokenizer, [env], [task], ["g"], SamplingParams(stop_token_ids=(tokenizer.eos_token_id,)),
                          AgentLimits(max_turns=6, tool_format=setting))
    assert traj.reward == 1.0 and traj.components["malformed_calls"] == 0 and "template_mismatch" not in traj.components
    prompt = tokenizer.decode(engine.prompts[0])
    assert ("Given the following functions" in prompt) == (name == "llama3.1" and template_writes)
    assert ("# Tools" in prompt) == (fmt == "hermes")  # rlyard's Hermes instructions, or Qwen's template's own
    assert ('"parameters": dictionary of argument' in prompt) == (fmt == "llama3_json")
    assert (env.template_tools is not None) == template_writes
    # the tool outputs came back in the template's own tool messages (Llama 3.1: the ipython role)
    assert ("<|start_header_id|>ipython" in tokenizer.decode(traj.token_ids)) == (name == "llama3.1")


# --------------------------------------------------------------------------- the llama3_json parser
def test_llama3_json_calls_and_the_errors_the_model_can_act_on():
    tools = [BASH, "submit"]
    ok = parse_tool_calls('<|python_tag|>{"name": "bash", "parameters": {"command": "ls ."}}; '
                          '{"name": "submit", "parameters": {"answer": "4"}}', "llama3_json", tools)
    assert [(c.name, c.arguments, c.id) for c in ok.calls] == [("bash", {"command": "ls ."}, "call_0"),
                                                               ("submit", {"answer": "4"}, "call_1")]
    assert ok.errors == [] and ok.text == ""
    fenced = parse_tool_calls('I will look.\n```json\n{"name": "bash", "arguments": {"command": "pwd"}}\n```', "llama3_json")
    assert [c.arguments for c in fenced.calls] == [{"command": "pwd"}] and fenced.text == "I will look."
    quoted = parse_tool_calls('The package is {"name": "mypkg", "version": "1.0"}.', "llama3_json", tools)
    assert quoted.calls == [] and quoted.errors == [] and "mypkg" in quoted.text  # data, not a call
    [cut] = parse_tool_calls('{"name": "bash", "parameters": {"command": "ls"}', "llama3_json", tools).errors
    assert cut.startswith("tool call 1: invalid JSON") and "close every brace" in cut and '"parameters"' in cut
    [unknown] = parse_tool_calls('{"name": "rm", "parameters": {}}', "llama3_json", tools).errors
    assert unknown == "tool call 1 (rm): unknown tool 'rm'. Available tools: bash, submit."
    [missing] = parse_tool_calls('{"name": "bash", "parameters": {"cmd": "ls"}}', "llama3_json", tools).errors
    assert "missing required argument 'command'" in missing
    [shape] = parse_tool_calls('{"name": "bash", "parameters": ["ls"]}', "llama3_json", tools).errors
    assert '"parameters" must be a JSON object, got array' in shape
    text = render_tool_specs([BASH], "llama3_json")
    assert text.startswith("You have access to the following functions.") and '"name": "bash"' in text


def test_llama3_json_fuzz_never_raises():
    alphabet = ['{', '}', '[', ']', '"', ':', ',', ';', '"name"', '"parameters"', '"arguments"', '"type"', '"function"',
                '"bash"', '"command"', "<|python_tag|>", "```json", "```", "\n", " ", "\\", "1", "null", "x", "é", "\ud800"]
    rng = random.Random(0)
    for _ in range(2500):
        reply = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        result = parse_tool_calls(reply, "llama3_json", [BASH] if rng.random() < 0.5 else None)
        assert isinstance(result.text, str) and all(isinstance(e, str) and e for e in result.errors)
        assert all(isinstance(c.arguments, dict) for c in result.calls)
    assert "nested too deeply" in parse_tool_calls('{"name": "bash", "parameters": ' + "[" * 100_000, "llama3_json").errors[0]
