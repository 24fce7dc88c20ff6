"""Session recording: what an outside agent harness did, as rlyard trajectories.

A harness that speaks the OpenAI API sends the whole conversation on every call and gets text
back. To keep the tokens the policy actually sampled, a session remembers its last prompt and
reply as tokens: when the next request repeats that conversation plus new messages, the new
prompt is built by appending only the rendered new messages to the remembered tokens (nothing
is decoded and re-encoded). A request that does not continue the conversation starts a new
segment; each segment becomes one Trajectory.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from rlyard.agent.loop import TemplateRenderer, TokenRecord
from rlyard.types import Completion, Message, Trajectory


@dataclass
class Segment(TokenRecord):
    messages: list[Message]  # the conversation so far, including the last assistant reply
    turns: int = 0
    finish_reason: str = ""


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
        segment = Segment(messages=list(messages))
        segment.extend(renderer.prompt(with_system(messages, system_extra)), sampled=False)
        self.segments.append(segment)
        return list(segment.token_ids)

    def record_reply(self, completion: Completion, reply_message: Message) -> None:
        segment = self.segments[-1]
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
