"""Session recording: what an outside agent harness did, as rlyard trajectories.

A harness that speaks the OpenAI API sends the whole conversation on every call and gets text
back. To keep the tokens the policy actually sampled, a session remembers its last prompt and
reply as tokens: when the next request repeats that conversation plus new messages, the new
prompt is built by appending only the rendered new messages to the remembered tokens (nothing
is decoded and re-encoded). A request that does not continue the conversation starts a new
segment; each segment becomes one Trajectory. Text completions are recorded the same way: a
prompt that extends the segment's text (or token ids) continues it.

A reply that did not end in a stop token (cut by `max_tokens`, or ended by a stop string) gets
the template's end-of-turn token (loss_mask 0: the policy did not sample it) before the next
messages, so the token list stays what the chat template renders for the conversation.
The recorded tokens of a reply ended by a stop string run up to and including the token that
completed it: they are what the policy sampled, while the client sees the text without it.

Each segment also keeps the exact text of every sampled reply (the client sees parsed tool
calls instead), so `export` can give the conversation as the policy saw and wrote it: the
demonstrations `rlyard collect --sessions` turns into supervised data.

Sessions are only touched from the server's event loop, so planning a prompt and recording
its reply need no lock; a reply whose segment changed in between (two requests of one session
at once) is recorded as a segment of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlyard.agent.loop import TemplateRenderer, TokenRecord
from rlyard.types import Message, Trajectory


@dataclass
class Segment(TokenRecord):
    messages: list[Message] = field(default_factory=list)  # the conversation so far, including the last reply
    kind: str = "chat"  # or "completion"
    text: str = ""  # completion segments: the prompt and reply texts as the client has them
    turns: int = 0
    finish_reason: str = ""
    system_extra: str = ""  # the tool instructions with_system added to the prompt of this segment
    replies: dict[int, str] = field(default_factory=dict)  # index in messages -> the exact sampled text
    temperatures: list[float] = field(default_factory=list)  # per token: what its logprob is under
    # per turn: temperature, top_p, top_k, max_tokens, and where its sampled tokens start / how many
    sampling: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, tokens: list[int], sampled: bool, logprobs: list[float] | None = None, version: int = -1,
               temperature: float = 1.0) -> None:
        super().extend(tokens, sampled, logprobs, version)
        # the real temperature: 0 for a greedy turn, whose argmax tokens are no draw from softmax(logits)
        self.temperatures += [temperature if sampled else 1.0] * len(tokens)

    def head(self, size: int, messages: int) -> Segment:
        """A new segment with the first `size` tokens of this one and the turns among them."""
        copy = Segment(kind=self.kind, system_extra=self.system_extra)
        for name in ("token_ids", "loss_mask", "logprobs", "versions", "temperatures"):
            setattr(copy, name, list(getattr(self, name)[:size]))
        copy.sampling = [turn for turn in self.sampling if turn["start"] < size]
        copy.turns = len(copy.sampling)
        copy.replies = {i: text for i, text in self.replies.items() if i < messages}
        return copy


@dataclass
class Plan:
    """The prompt of one request and how it extends the session, recorded once the reply is in."""

    prompt: list[int]  # every token of the prompt
    segment: Segment | None  # the segment it continues (None: a new one)
    base: int  # that segment's length when planned
    added: list[int]  # the tokens after the segment's (all of `prompt` for a new segment)
    kind: str = "chat"
    messages: list[Message] = field(default_factory=list)
    system_extra: str = ""
    text: str = ""  # completions: the prompt text


class Session:
    def __init__(self, session_id: str):
        self.id = session_id
        self.segments: list[Segment] = []

    def _current(self, kind: str) -> Segment | None:
        current = self.segments[-1] if self.segments else None
        return current if current is not None and current.kind == kind else None

    def plan_chat(self, renderer: TemplateRenderer, messages: list[Message], system_extra: str, end_of_turn: int) -> Plan:
        """The prompt for `messages`, continuing the current segment's tokens when it can."""
        current = self._current("chat")
        if current is not None and len(messages) > len(current.messages) and _same(messages[: len(current.messages)], current.messages):
            new = messages[len(current.messages):]
            if all(m["role"] != "assistant" for m in new):
                ended = current.token_ids[-1] in renderer.stop_token_ids
                added = ([] if ended else [end_of_turn]) + renderer.after_reply(new)
                return Plan(current.token_ids + added, current, len(current.token_ids), added, messages=list(messages),
                            system_extra=current.system_extra)
        prompt = renderer.prompt(with_system(messages, system_extra))
        return Plan(prompt, None, 0, prompt, messages=list(messages), system_extra=system_extra)

    def plan_completion(self, tokenizer, prompt: str | list[int]) -> Plan:
        """Text prompts continue the segment when they extend its text (the rest is tokenised
        alone: the sampled tokens stay as they were), token prompts when they extend its tokens."""
        current = self._current("completion")
        if isinstance(prompt, str):
            if current is not None and current.text and prompt.startswith(current.text) and len(prompt) > len(current.text):
                added = tokenizer(prompt[len(current.text):], add_special_tokens=False).input_ids
                return Plan(current.token_ids + added, current, len(current.token_ids), added, "completion", text=prompt)
            ids = tokenizer(prompt, add_special_tokens=False).input_ids
            return Plan(ids, None, 0, ids, "completion", text=prompt)
        size = len(current.token_ids) if current is not None else 0
        if current is not None and len(prompt) > size and prompt[:size] == current.token_ids:
            return Plan(list(prompt), current, size, list(prompt[size:]), "completion")
        return Plan(list(prompt), None, 0, list(prompt), "completion")

    def record(self, plan: Plan, tokens: list[int], logprobs: list[float], version: int, sampling: dict[str, Any],
               finish_reason: str, reply_text: str, reply_message: Message | None = None) -> None:
        """Append the reply; `reply_text` is what the policy sampled, decoded (the message may hold parsed tool calls)."""
        segment = plan.segment
        if segment is None or segment is not (self.segments[-1] if self.segments else None) or len(segment.token_ids) != plan.base:
            fresh = Segment(kind=plan.kind, system_extra=plan.system_extra) if segment is None else segment.head(plan.base, len(plan.messages))
            segment = fresh
            self.segments.append(segment)
        segment.extend(plan.added, sampled=False)
        start = len(segment.token_ids)
        segment.extend(tokens, sampled=True, logprobs=list(logprobs), version=version, temperature=sampling["temperature"])
        if plan.kind == "chat":
            segment.replies[len(plan.messages)] = reply_text
            segment.messages = [*plan.messages, reply_message or {"role": "assistant", "content": reply_text}]
        else:  # only text prompts can continue by text
            segment.text = plan.text + reply_text if plan.text else ""
        segment.turns += 1
        segment.finish_reason = finish_reason
        segment.sampling.append({**sampling, "start": start, "tokens": len(tokens)})

    def trajectories(self, reward: float = 0.0) -> list[Trajectory]:
        """One per segment with a sampled reply; tokens of greedy (T = 0) turns carry temperature 0,
        which the learner leaves out of its loss (an argmax is no draw from softmax(logits))."""
        return [
            Trajectory(task_id=self.id, group_id=self.id, token_ids=list(s.token_ids), loss_mask=list(s.loss_mask),
                       behaviour_logprobs=list(s.logprobs), policy_versions=list(s.versions), reward=reward,
                       finish_reason=s.finish_reason, turns=s.turns, temperatures=list(s.temperatures))
            for s in self.segments if any(s.loss_mask)
        ]

    def export(self) -> dict[str, Any]:
        """Every chat segment with a sampled reply as a plain conversation: the system message
        with the tool instructions the prompt had, each sampled reply as its exact text, other
        messages as role and content (what the chat template rendered), and each turn's sampling
        parameters; text-completion segments as their whole text."""
        conversations, completions = [], []
        for s in self.segments:
            if not s.turns:
                continue
            if s.kind == "completion":
                completions.append({"text": s.text, "turns": s.turns, "finish_reason": s.finish_reason, "sampling": s.sampling})
                continue
            plain = [{"role": m["role"], "content": s.replies[i] if i in s.replies else m.get("content") or ""}
                     for i, m in enumerate(s.messages)]
            conversations.append({"messages": with_system(plain, s.system_extra), "turns": s.turns,
                                  "finish_reason": s.finish_reason, "sampling": s.sampling})
        return {"session": self.id, "conversations": conversations, "completions": completions}


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
