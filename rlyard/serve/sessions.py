"""Session recording: what an outside agent harness did, as rlyard trajectories.

A harness that speaks the OpenAI API sends the whole conversation on every call and gets text
back. To keep the tokens the policy actually sampled, a session remembers its last prompt and
reply as tokens: when the next request repeats that conversation plus new messages, the new
prompt is built by appending only the rendered new messages to the remembered tokens (nothing
is decoded and re-encoded). A request that does not continue the conversation starts a new
segment; each segment becomes one Trajectory.

Each segment also keeps the exact text of every sampled reply (the client sees parsed tool
calls instead), so `export` can give the conversation as the policy saw and wrote it: the
demonstrations `rlyard collect --sessions` turns into supervised data.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from rlyard.agent.loop import TemplateRenderer, TokenRecord
from rlyard.types import Completion, Message, Trajectory


@dataclass
class Segment(TokenRecord):
    messages: list[Message]  # the conversation so far, including the last assistant reply
    turns: int = 0
    finish_reason: str = ""
    system_extra: str = ""  # the tool instructions with_system added to the prompt of this segment
    replies: dict[int, str] = field(default_factory=dict)  # index in messages -> the exact sampled text


class Session:
    def __init__(self, session_id: str):
        self.id = session_id
        self.segments: list[Segment] = []
        self.lock = threading.Lock()

    def prompt_tokens(self, renderer: TemplateRenderer, messages: list[Message], system_extra: str) -> list[int]:
        """The prompt for `messages`, continuing the current segment's tokens when it can."""
        current = self.segments[-1] if self.segments else None
        if current is not None and len(messages) > len(current.messages) and _same(messages[: len(current.messages)], current.messages):
            new = messages[len(current.messages):]
            if new and all(m["role"] != "assistant" for m in new):
                current.extend(renderer.after_reply(new), sampled=False)
                current.messages = list(messages)
                return list(current.token_ids)
        segment = Segment(messages=list(messages), system_extra=system_extra)
        segment.extend(renderer.prompt(with_system(messages, system_extra)), sampled=False)
        self.segments.append(segment)
        return list(segment.token_ids)

    def record_reply(self, completion: Completion, reply_message: Message, text: str | None = None) -> None:
        """Append the reply; `text` is what the policy sampled, decoded (the message may hold parsed tool calls)."""
        segment = self.segments[-1]
        segment.replies[len(segment.messages)] = (reply_message.get("content") or "") if text is None else text
        segment.extend(completion.token_ids, sampled=True, logprobs=list(completion.logprobs), version=completion.policy_version)
        segment.messages.append(reply_message)
        segment.turns += 1
        segment.finish_reason = completion.finish_reason

    def trajectories(self, reward: float = 0.0) -> list[Trajectory]:
        return [
            Trajectory(task_id=self.id, group_id=self.id, token_ids=list(s.token_ids), loss_mask=list(s.loss_mask),
                       behaviour_logprobs=list(s.logprobs), policy_versions=list(s.versions), reward=reward,
                       finish_reason=s.finish_reason, turns=s.turns)
            for s in self.segments if any(s.loss_mask)
        ]

    def export(self) -> dict[str, Any]:
        """Every segment with a sampled reply as a plain conversation: the system message with the
        tool instructions the prompt had, each sampled reply as its exact text, other messages as
        role and content (what the chat template rendered)."""
        conversations = []
        for s in self.segments:
            if not s.replies:
                continue
            plain = [{"role": m["role"], "content": s.replies[i] if i in s.replies else m.get("content") or ""}
                     for i, m in enumerate(s.messages)]
            conversations.append({"messages": with_system(plain, s.system_extra), "turns": s.turns,
                                  "finish_reason": s.finish_reason})
        return {"session": self.id, "conversations": conversations}


def with_system(messages: list[Message], extra: str) -> list[Message]:
    """Tool instructions go into the system message (the template may not know tools)."""
    if not extra:
        return messages
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{extra}"}, *messages[1:]]
    return [{"role": "system", "content": extra}, *messages]


def _key(message: Message) -> tuple:
    calls = [(c.get("function", {}).get("name"), c.get("function", {}).get("arguments")) for c in message.get("tool_calls") or []]
    return message.get("role"), message.get("content") or "", calls


def _same(a: list[Message], b: list[Message]) -> bool:
    """Equal as a conversation: clients echo messages back with their own extra fields."""
    return [_key(m) for m in a] == [_key(m) for m in b]
