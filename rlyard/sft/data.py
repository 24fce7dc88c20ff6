"""SFT data: conversations from JSONL, checked line by line, assistant turns as reply text.

One conversation per line: `{"messages": [...], "tools": [...], "metadata": {...}}` (tools and
metadata optional). Roles are system, user, assistant and tool. An assistant message's
`content` is the exact text the policy would write; an assistant message in the OpenAI shape
(`tool_calls` with JSON-string arguments, content null or text) is written out in the Hermes
convention that rlyard's tool families parse (`rlyard.agent.toolcalls`), so the model learns the
very text its RL environment reads. Every problem raises `DataError` naming the file, the line
and the field, e.g. `demos.jsonl line 7: messages[3].role 'bot' is not one of ...`.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlyard.agent.toolcalls import hermes_call, normalize_tool
from rlyard.types import Message

ROLES = ("system", "user", "assistant", "tool")
FIELDS = ("messages", "tools", "metadata")
REPLY_FOLLOWS = ("user", "tool")  # an assistant message answers one of these


class DataError(ValueError):
    """A problem in an SFT data file, worded as `FILE line N: field: what is wrong`."""


@dataclass(frozen=True)
class Conversation:
    """One checked line: messages with every assistant `content` the reply text."""

    messages: list[Message]
    tools: list[dict] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # "demos.jsonl line 7", for messages about this conversation


def assistant_text(content: str | None, tool_calls: list[dict]) -> str:
    """An OpenAI-shaped assistant message as reply text: its content, then one block per call, one per line."""
    calls = []
    for k, call in enumerate(tool_calls):
        where = f"tool_calls[{k}]"
        if not isinstance(call, dict):
            raise ValueError(f"{where} must be an object, got {type(call).__name__}")
        if call.get("type", "function") != "function":
            raise ValueError(f"{where}.type {call.get('type')!r} is not 'function'")
        function = call.get("function")
        if not isinstance(function, dict):
            raise ValueError(f"{where}.function must be an object with name and arguments")
        name = function.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}.function.name must be a non-empty string, got {name!r}")
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}.function.arguments is not valid JSON ({e})") from None
        if not isinstance(arguments, dict):
            raise ValueError(f"{where}.function.arguments must be a JSON object, got {type(arguments).__name__}")
        calls.append(hermes_call(name.strip(), arguments))
    return "\n".join(([content] if content else []) + calls)


def check_message(message: Any, index: int, previous: str | None) -> Message:
    """One message, checked; an assistant message comes back with its reply text as `content`."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise ValueError(f"{where} must be an object with role and content, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"{where}.role {role!r} is not one of {', '.join(ROLES)}")
    content = message.get("content")
    if role != "assistant":
        if not isinstance(content, str):
            raise ValueError(f"{where}.content must be a string, got {type(content).__name__}")
        return dict(message)
    if previous not in REPLY_FOLLOWS:
        after = f"{'an' if previous == 'assistant' else 'a'} {previous} message" if previous else "the start of the conversation"
        raise ValueError(f"{where}: an assistant message must follow a user or tool message, not {after}")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"{where}.content must be a string or null, got {type(content).__name__}")
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise ValueError(f"{where}.tool_calls must be a list, got {type(tool_calls).__name__}")
    try:
        text = assistant_text(content, tool_calls)
    except ValueError as e:
        raise ValueError(f"{where}.{e}") from None
    if not text:
        raise ValueError(f"{where}: an assistant message needs content or tool_calls")
    return {"role": "assistant", "content": text}


def check_row(row: Any) -> Conversation:
    """A decoded JSONL line as a Conversation; ValueError naming the field otherwise."""
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object with 'messages', got {type(row).__name__}")
    unknown = [key for key in row if key not in FIELDS]
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}; a line holds {', '.join(FIELDS)}")
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {role, content} objects")
    checked, previous = [], None
    for index, message in enumerate(messages):
        checked.append(check_message(message, index, previous))
        previous = checked[-1]["role"]
    if not any(m["role"] == "assistant" for m in checked):
        raise ValueError("no assistant message: nothing to train on")
    tools = row.get("tools") or None
    if tools is not None:
        if not isinstance(tools, list):
            raise ValueError(f"tools must be a list of tool specs, got {type(tools).__name__}")
        for k, spec in enumerate(tools):
            try:
                normalize_tool(spec)
            except (TypeError, ValueError) as e:
                raise ValueError(f"tools[{k}]: {e}") from None
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError(f"metadata must be an object, got {type(metadata).__name__}")
    return Conversation(checked, tools, metadata)


def load_conversations(path: str | Path) -> list[Conversation]:
    """Every conversation of a JSONL file (blank lines skipped); DataError at the first bad line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file (sft.data / sft.eval_data is a JSONL file, one conversation per line)")
    conversations = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            source = f"{path} line {number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path} line {number}: not valid JSON ({e})") from None
            try:
                conversation = check_row(row)
            except ValueError as e:
                raise DataError(f"{path} line {number}: {e}") from None
            conversations.append(Conversation(conversation.messages, conversation.tools, conversation.metadata, source))
    if not conversations:
        raise DataError(f"{path}: no conversations (one JSON object per line)")
    return conversations


def split_held_out(conversations: list[Conversation], fraction: float, seed: int) -> tuple[list[Conversation], list[Conversation]]:
    """(train, held-out): a seeded share of the conversations, at least one when `fraction` > 0."""
    if fraction <= 0:
        return list(conversations), []
    count = max(1, round(fraction * len(conversations)))
    if count >= len(conversations):
        raise DataError(f"sft.eval_fraction={fraction} of {len(conversations)} conversation(s) leaves none to train on; "
                        "add conversations, give sft.eval_data, or set sft.eval_fraction=0")
    order = list(range(len(conversations)))
    random.Random(seed).shuffle(order)
    held = set(order[:count])
    return ([c for i, c in enumerate(conversations) if i not in held],
            [c for i, c in enumerate(conversations) if i in held])


def file_digest(path: str | Path) -> str:
    """sha256 of a data file: a resumed run checks it trains on the same data."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
