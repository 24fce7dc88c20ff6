"""What a chat template does, found by rendering it (its Jinja is never parsed): the token that ends
an assistant message, whether tool messages show, whether it writes tool instructions and in which
call format, whether it is a reasoning template. See docs/models.md.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

MARK = "RLYARD_PROBE_7f3a"  # probe content: no spaces (templates may trim) and nothing a template parses
PROBE_TOOL = {"type": "function", "function": {
    "name": "rlyard_probe_tool", "description": "A probe.",
    "parameters": {"type": "object", "properties": {"x": {"type": "integer", "description": "A number."}}, "required": ["x"]}}}
PROBE_CALL = {"type": "function", "function": {"name": "rlyard_probe_tool", "arguments": {"x": 1}}}
TOOL_FORMATS = ("hermes", "llama3_json")  # the call formats a template can be detected to teach


def render(tokenizer, messages: list[dict], tools: list[dict] | None = None, generation: bool = False) -> str:
    """The template's text for `messages` (with the assistant header after them when `generation`)."""
    kwargs = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation, **kwargs)


def read_chat_template(value: str) -> str:
    """`model.chat_template`: the template text itself, or a file holding it (.jinja / .txt, or a
    .json file with a "chat_template" key, as HF's tokenizer_config.json and chat_template.json)."""
    if "{{" in value or "{%" in value:
        return value
    path = Path(value).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"model.chat_template: no file {str(path)!r}; give a Jinja chat template file "
                                "(e.g. templates/qwen3.jinja) or the template text itself")
    text = path.read_text()
    if path.suffix != ".json":
        return text
    template = json.loads(text).get("chat_template")
    if not isinstance(template, str):
        raise ValueError(f"model.chat_template: {path} has no \"chat_template\" string")
    return template


def source(tokenizer) -> str:
    """The template's Jinja text (every named template, for tokenizers that keep several)."""
    template = tokenizer.chat_template
    return "\n".join(template.values()) if isinstance(template, dict) else str(template or "")


def special_ids(tokenizer) -> set[int]:
    return set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))


def end_of_message_id(tokenizer) -> int | None:
    """The token the template writes right after an assistant message's content (`<|im_end|>`,
    `<|eot_id|>`, Phi-3's `<|end|>`): the one the policy samples to end its turn. None when the
    template writes plain text there (the turn then ends on eos)."""
    rendered = render(tokenizer, [{"role": "user", "content": "u"}, {"role": "assistant", "content": MARK}])
    tail = rendered[rendered.rindex(MARK) + len(MARK):]
    specials, ids = special_ids(tokenizer), tokenizer(tail, add_special_tokens=False).input_ids
    for index, token in enumerate(ids):
        if token in specials:
            return token if not tokenizer.decode(ids[:index]).strip() else None
    return None


def shows_tool_messages(tokenizer) -> bool:
    """Whether a "tool" message after a reply reaches the rendered text (Phi-3's template drops
    it; Gemma's raises on it): when not, the loop sends the environment's answers as "user" ones."""
    probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}, {"role": "tool", "content": MARK}]
    try:
        return MARK in render(tokenizer, probe, generation=True)
    except Exception:
        return False


def thinks(tokenizer) -> bool:
    """A reasoning template (Qwen3, SmolLM3): replies start with a <think> section."""
    return "</think>" in source(tokenizer)


# How each format's call looks: as the template writes a call in an assistant message, and in its
# instructions. Only JSON calls count: Qwen3-Coder's and GLM's <tool_call> hold XML, not JSON.
WRITTEN = {"hermes": re.compile(r'<tool_call>\s*\{\s*"name"\s*:\s*"rlyard_probe_tool"\s*,\s*"arguments"\s*:'),
           "llama3_json": re.compile(r'^(<\|python_tag\|>)?\s*\{\s*"name"\s*:\s*"rlyard_probe_tool"\s*,\s*"parameters"\s*:')}
TAUGHT = {"hermes": re.compile(r'<tool_call>\s*\{\s*\\?"name\\?"\s*:'),
          "llama3_json": re.compile(r'"name"\s*:\s*function name\s*,\s*"parameters"\s*:')}


def template_tool_format(tokenizer) -> str | None:
    """The call format the template teaches when given `tools` ("hermes": <tool_call> JSON, Qwen2.5 /
    Qwen3 / Hermes; "llama3_json": a bare {"name", "parameters"} object, Llama 3.1 / 3.2 / 3.3),
    or None when it renders no tool instructions or teaches a format rlyard does not parse."""
    user = [{"role": "user", "content": "u"}]
    try:
        with_tools = render(tokenizer, user, [PROBE_TOOL], generation=True)
    except Exception:
        return None
    try:
        if with_tools == render(tokenizer, user, generation=True):
            return None  # tools are ignored (SmolLM2; SmolLM3 takes them as `xml_tools`)
    except Exception:
        pass  # a template only for tool use (Hermes' "tool_use") needs them
    try:  # how the template writes a call in an assistant message: the format its model was trained on
        called = render(tokenizer, [*user, {"role": "assistant", "content": "", "tool_calls": [PROBE_CALL]}], [PROBE_TOOL])
        prompt = render(tokenizer, user, [PROBE_TOOL], generation=True)
        written = called[len(prompt):].strip() if called.startswith(prompt) else ""
    except Exception:
        written = ""
    for patterns, text in ((WRITTEN, written), (TAUGHT, with_tools)):
        found = [fmt for fmt, pattern in patterns.items() if pattern.search(text)]
        if len(found) == 1:
            return found[0]
    return None


def choose_tool_format(setting: str, tokenizer) -> tuple[str | None, bool]:
    """`agent.tool_format` for this tokenizer: (the format every tool environment uses, None for each
    family's own; whether the chat template writes the tool instructions, given the specs as `tools`).

    "auto": the template's own format when it renders tools, else the family's; "family": always
    the family's; a format name: that one, with the template's instructions if it teaches the same."""
    if setting == "family":
        return None, False
    detected = template_tool_format(tokenizer) if setting != "bash_block" else None
    if setting == "auto":
        return (detected, True) if detected else (None, False)
    return setting, detected == setting
