"""Batching requests into engine calls, and following each sampled row token by token.

One engine call runs at a time, in the scheduler's thread (torch blocks; the event loop must
not). When the engine is free, the requests waiting with the same sampling parameters and model
(the served one or a LoRA adapter) as the oldest one go into one `engine.generate` call:
concurrent clients share the decode steps.

Each sampled sequence is a `Row`. Through the engine's `on_step` hook a row sees its tokens as
they are sampled: it decodes its text, ends itself at a stop string (which may span tokens or
end mid-token), and hands the text that is safe to show to the request's event queue, for
streaming. A row of an abandoned request asks the engine to drop it at the next step. An
engine without the hook still works: its completions are fed through the same rows afterwards.
"""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from rlyard.engines.base import accepts_hook
from rlyard.types import Completion, SamplingParams

HOLD_MARKER = "<tool_call>"  # with tools, the text from here on is shown as tool_calls, not content


class Row:
    """One choice of a request: its sampled tokens and the text the client sees.

    The tokens are exactly what the policy sampled, up to and including the token that completed
    a stop string (that token may carry text before or after the stop string, so the tokens
    cannot be cut to match the text); `text` is the decoded reply without the stop string.
    """

    def __init__(self, tokenizer, stops: list[str], stop_token_ids: tuple[int, ...], max_tokens: int, hold: str = ""):
        self.tokenizer, self.stops, self.stop_token_ids = tokenizer, stops, set(stop_token_ids)
        self.max_tokens, self.hold = max_tokens, hold
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.text = ""
        self.shown = 0  # characters of `text` already handed out as deltas
        self.finish: str | None = None  # "stop" | "length" once done

    def push(self, token: int, logprob: float) -> str:
        """Take the next sampled token; return the new text that is safe to show."""
        self.tokens.append(token)
        self.logprobs.append(logprob)
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        longest = max((len(s) for s in self.stops), default=0)
        hits = [i for i in (text.find(s, max(0, len(self.text) - longest + 1)) for s in self.stops) if i >= 0]
        self.text = text[: min(hits)] if hits else text
        if hits or token in self.stop_token_ids:
            self.finish = "stop"
        elif len(self.tokens) >= self.max_tokens:
            self.finish = "length"
        return self._release()

    def _release(self) -> str:
        """Text up to where it may still change: not a trailing partial UTF-8 character, not a
        suffix that could begin a stop string, nothing from the tool-call marker on."""
        text, end = self.text, len(self.text)
        if self.hold and self.hold in text:
            end = text.index(self.hold)
        elif self.finish is None:
            end -= len(text) - len(text.rstrip("\ufffd"))
            for pattern in [*self.stops, self.hold] if self.hold else self.stops:
                end = min(end, len(text) - _partial_suffix(text, pattern))
        delta = text[self.shown : end] if end > self.shown else ""
        self.shown = max(self.shown, end)
        return delta

    def unshown(self) -> str:
        return self.text[self.shown :]


def _partial_suffix(text: str, pattern: str) -> int:
    """Length of the longest end of `text` that is a proper beginning of `pattern`."""
    for size in range(min(len(pattern) - 1, len(text)), 0, -1):
        if text.endswith(pattern[:size]):
            return size
    return 0


@dataclass
class Job:
    """One request: `n` rows from one prompt. Its events reach the request's event loop as
    ("token", choice, delta text, token, logprob) and finally ("done", policy version | None, error | None)."""

    prompt: list[int]
    params: SamplingParams  # its stop_token_ids are the server's; stop strings live in the rows
    rows: list[Row]
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: bool = False  # the client went away: drop the rows at the next step
    policy_version: int | None = None  # of the engine call (its weights do not change during one)
    answered: bool = False  # "done" was posted: a job answers once its rows are done, not when its batch is
    model: str = ""  # the served model or a loaded LoRA adapter: a batch samples from one

    def cancel(self) -> None:
        self.cancelled = True

    def post(self, *event: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the loop is closed: the server is shutting down
            pass

    def step(self, choice: int, token: int, logprob: float) -> bool:
        """A sampled token of row `choice`; True when that row should leave the batch."""
        row = self.rows[choice]
        if self.cancelled or row.finish is not None:  # an engine without the hook overran the stop
            return True
        delta = row.push(token, logprob)
        self.post("token", choice, delta, token, logprob)
        if all(r.finish is not None for r in self.rows):
            self.done()
        return row.finish is not None or self.cancelled

    def done(self, error: Exception | None = None) -> None:
        if not self.answered:
            self.answered = True
            self.post("done", self.policy_version, error)

    def complete(self, choice: int, completion: Completion, streamed: bool) -> None:
        row = self.rows[choice]
        if not streamed:
            for token, logprob in zip(completion.token_ids, completion.logprobs):
                if self.step(choice, token, logprob):
                    break
        if row.finish is None:  # an abandoned row, or an engine that stopped on its own
            row.finish = "stop" if completion.finish_reason == "stop" else "length"


class Scheduler:
    def __init__(self, engine, select=None):
        """`select(model)` (optional) gives the engine that model's weights before a batch for it runs."""
        self.engine, self.select = engine, select
        self.streams = accepts_hook(engine)
        self.waiting: list[Job] = []
        self.calls = 0  # engine calls made (for logs and tests)
        self.condition = threading.Condition()
        self.thread: threading.Thread | None = None

    def submit(self, job: Job) -> None:
        with self.condition:
            self.waiting.append(job)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="rlyard-serve-engine", daemon=True)
                self.thread.start()
            self.condition.notify()

    def _next_batch(self) -> list[Job]:
        """The oldest waiting request and every other one with its sampling parameters."""
        with self.condition:
            while not self.waiting:
                self.condition.wait()
            key = _batch_key(self.waiting[0])
            batch = [job for job in self.waiting if _batch_key(job) == key and not job.cancelled]
            dropped = [job for job in self.waiting if job.cancelled]
            self.waiting = [job for job in self.waiting if job not in batch and not job.cancelled]
        for job in dropped:
            job.done()
        return batch

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch:
                self._generate(batch)

    def _generate(self, batch: list[Job]) -> None:
        # n samples of a request are n copies of its prompt: requests with different n share a call
        owners = [(job, choice) for job in batch for choice in range(len(job.rows))]
        params = replace(batch[0].params, cache_prefix=any(job.params.cache_prefix for job in batch))

        def on_step(outputs: list[tuple[int, int, float]]) -> list[int]:
            return [index for index, token, logprob in outputs if owners[index][0].step(owners[index][1], token, logprob)]

        kwargs = {"on_step": on_step} if self.streams else {}
        for job in batch:
            job.policy_version = getattr(self.engine, "policy_version", -1)
        try:
            if self.select is not None:
                self.select(batch[0].model)
            self.calls += 1
            results = self.engine.generate([job.prompt for job, _ in owners], params, n=1, **kwargs)
            for (job, choice), [completion] in zip(owners, results):
                job.policy_version = completion.policy_version
                job.complete(choice, completion, streamed=self.streams)
        except Exception as exc:  # the server stays up; each request of the batch gets the error
            for job in batch:
                job.done(exc)
            return
        for job in batch:
            job.done()


def _batch_key(job: Job) -> tuple[SamplingParams, str]:
    return replace(job.params, cache_prefix=False), job.model
