"""bench/vs_trl_agentic.py's two stand-ins for what TRL lacks: the response template that reads a
```bash block as a tool call, and the environment that plays rlyard's files task through it."""
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from vs_trl_agentic import SMOL_BASH_TEMPLATE, SMOL_TOOL_CHAT_TEMPLATE, FilesTools  # noqa: E402

from rlyard.envs import get_family  # noqa: E402

OPTIONS = {"sites": 3, "devices_per_site": 4, "hops": 2, "tool_format": "bash_block"}  # the agentic quickstart's


def parse(tokenizer, reply: str) -> dict:
    from trl.chat_template_utils import parse_response

    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    return parse_response(tokenizer, tokenizer(reply, add_special_tokens=False).input_ids,
                          prefix=tokenizer(prompt, add_special_tokens=False).input_ids)


def test_a_bash_block_is_a_bash_call_and_prose_is_content(tokenizer):
    tokenizer.response_template = SMOL_BASH_TEMPLATE
    try:
        call = parse(tokenizer, "Looking it up.\n```bash\ngrep -rn 'name: x7' inventory\n```<|im_end|>")
        plain = parse(tokenizer, "The team is Willow.<|im_end|>")
    finally:
        del tokenizer.response_template
    assert call["content"] == "Looking it up."
    assert call["tool_calls"] == [{"type": "function", "function": {"name": "bash", "arguments": {"command": "grep -rn 'name: x7' inventory"}}}]
    assert plain == {"role": "assistant", "content": "The team is Willow."}


def test_trls_copy_of_the_template_renders_prompts_as_smollm2s_own_and_a_bash_call_as_its_block(tokenizer):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    conversations = [[{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}], [{"role": "user", "content": "q"}],
                     [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "out"}]]
    own = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
    copy = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True, chat_template=SMOL_TOOL_CHAT_TEMPLATE)
            for c in conversations]
    assert copy == own
    call = [*conversations[1], {"role": "assistant", "content": "Look.", "tool_calls": [
        {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]}]
    assert tokenizer.apply_chat_template(call, tokenize=False, chat_template=SMOL_TOOL_CHAT_TEMPLATE).endswith(
        "<|im_start|>assistant\nLook.\n```bash\nls\n```<|im_end|>\n")
    original = tokenizer.chat_template
    tokenizer.chat_template = SMOL_TOOL_CHAT_TEMPLATE
    try:
        assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    finally:
        tokenizer.chat_template = original
    assert not supports_tool_calling(tokenizer)  # SmolLM2's own: what TRL refuses


def test_the_tool_environment_plays_the_oracle_to_rlyards_reward_and_a_wrong_answer_to_0():
    family = get_family("files")
    tasks = family.make_tasks("train", 2, seed=3, **OPTIONS)
    FilesTools.family, FilesTools.tasks = family, tasks
    tools = FilesTools()
    rewards = []
    for index, wrong in ((0, False), (1, True)):
        tools.reset(task_index=index, prompt=None)
        commands = [re.search(r"```bash\n(.*?)\n```", reply, re.S).group(1) for reply in family.oracle(tasks[index], random.Random(index))]
        assert commands[-1].startswith("submit ")
        outputs = [tools.bash("submit nobody" if wrong and command.startswith("submit") else command) for command in commands]
        assert outputs[-1] == "submitted" and tools.bash("ls") == "the episode is over"
        assert all(output.startswith("[bash]") for output in outputs[:-1]), outputs
        rewards.append(tools.get_reward())
    assert rewards == [1.0, 0.0]
    assert tools.env is None  # get_reward closed the episode's workspace
