"""Conversations as training examples (the rollout's tokens) and their order: length-grouped micro-batches.

Why length grouping and not packing: a micro-batch is padded to its longest conversation, so
putting conversations of similar length together removes most of the padding, and it is exact
with any model (each row is one conversation, causal attention never sees another one). Packing
several conversations into one row wastes nothing, but without a block-diagonal attention mask
(flash-attention's variable-length kernels, not transformers' CPU path) each conversation would
attend to the ones packed before it, and the sequences would no longer be the rollout's.

The order of an epoch is a pure function of (seed, epoch): the conversations are shuffled, cut
into windows of `length_window` micro-batches, sorted by length within each window, cut into
micro-batches, and the micro-batches shuffled again (so a step's length is random, not rising).
A resumed run therefore needs only its step number to continue with the same data.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from rlyard.agent.loop import AgentLimits, TemplateRenderer, conversation_tokens
from rlyard.sft.data import Conversation, DataError


@dataclass(frozen=True)
class Example:
    """One conversation as the learner sees it."""

    token_ids: list[int]
    loss_mask: list[int]  # 1 on assistant tokens (reply text and its stop token)
    source: str  # "demos.jsonl line 7"

    @property
    def assistant_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True)
class Tokenized:
    examples: list[Example]
    cut: int  # conversations longer than max_length, cut to it
    dropped: int  # conversations with no assistant token left: the prompt alone fills agent.max_total_tokens or max_length
    # conversations the rollout would have ended early, by why (prompt_too_long, token_budget, turn_token_limit,
    # turn_limit): each kept up to there, as run_episodes would hold it (prompt_too_long ones are dropped)
    ended: dict[str, int] = field(default_factory=dict)


def tokenize(conversations: list[Conversation], renderer: TemplateRenderer, stop_id: int, limits: AgentLimits,
             max_length: int) -> Tokenized:
    """Each conversation as `conversation_tokens` builds it under the rollout's `limits` (the
    tokens `run_episodes` would hold: the first prompt cut to `limits.prompt_limit`, the
    conversation ended where the episode would end), then cut to `max_length` tokens."""
    examples, cut, dropped, ended = [], 0, 0, {}
    stop_texts = [text for text in renderer.stop_texts if text]
    for conversation in conversations:
        for index, message in enumerate(conversation.messages):
            found = next((text for text in stop_texts if message["role"] == "assistant" and text in message["content"]), None)
            if found:
                raise DataError(f"{conversation.source}: messages[{index}].content contains the stop token {found!r}; "
                                "leave it out (rlyard ends every reply with it)")
        record = conversation_tokens(renderer, conversation.messages, conversation.tools, stop_id, limits)
        if record.ended:
            ended[record.ended] = ended.get(record.ended, 0) + 1
        ids, mask = record.token_ids, record.loss_mask
        if len(ids) > max_length:
            cut += 1
            ids, mask = ids[:max_length], mask[:max_length]
        if not any(mask):
            dropped += 1
            continue
        examples.append(Example(ids, mask, conversation.source))
    return Tokenized(examples, cut, dropped, ended)


def ignored_tools_note(conversations: list[Conversation], renderer: TemplateRenderer) -> str | None:
    """A warning when conversations give `tools` that the chat template does not render (SmolLM2's
    template has no tools section), so the specs never reach the model."""
    with_tools = next((c for c in conversations if c.tools), None)
    if with_tools is None:
        return None
    first = next(i for i, m in enumerate(with_tools.messages) if m["role"] == "assistant")
    prompt = with_tools.messages[:first]
    if renderer.prompt(prompt, with_tools.tools) != renderer.prompt(prompt):
        return None
    return (f"the chat template ignores `tools` (e.g. {with_tools.source}): the model sees tool specs only where the "
            "system message holds them, as rlyard's tool families write it (rlyard.agent.toolcalls.render_tool_specs)")


class DataOrder:
    """Which examples each optimizer step trains on: `batch_size // micro_batch_size` micro-batches a step."""

    def __init__(self, lengths: list[int], batch_size: int, micro_batch_size: int, window: int, seed: int):
        if not lengths:
            raise DataError("no training conversations left (all held out or longer than sft.max_length before their first reply)")
        self.lengths, self.micro_batch_size, self.window, self.seed = lengths, micro_batch_size, window, seed
        self.per_step = batch_size // micro_batch_size
        self.micro_per_epoch = len(self.epoch(0))
        self.steps_per_epoch = math.ceil(self.micro_per_epoch / self.per_step)
        self._cached: tuple[int, list[list[int]]] | None = None

    def epoch(self, epoch: int) -> list[list[int]]:
        """The micro-batches of one epoch (lists of example indices), in training order."""
        rng = random.Random(self.seed * 1_000_003 + epoch)
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        span = self.window * self.micro_batch_size
        micro = []
        for start in range(0, len(order), span):
            chunk = sorted(order[start:start + span], key=lambda i: self.lengths[i])
            micro += [chunk[k:k + self.micro_batch_size] for k in range(0, len(chunk), self.micro_batch_size)]
        rng.shuffle(micro)
        return micro

    def step(self, step: int) -> list[list[int]]:
        """The micro-batches of optimizer step `step` (0-based); past the last epoch the order goes on with the next."""
        epoch, offset = divmod(step, self.steps_per_epoch)
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, self.epoch(epoch))
        return self._cached[1][offset * self.per_step:(offset + 1) * self.per_step]
