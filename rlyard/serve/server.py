"""`rlyard serve`: an OpenAI-compatible server over any rlyard engine, with session recording.

Endpoints (routes in `app.py`): GET /v1/models, POST /v1/completions, POST /v1/chat/completions
(tools in the Hermes <tool_call> convention, streaming or not). Under /sessions/<id>/v1/... every
call is recorded token by token, so an agent harness pointed at that base URL can be trained by
rlyard unchanged: GET /sessions/<id>/trajectories returns what it did as rlyard Trajectories,
and GET /sessions/<id>/messages its conversations with the exact reply texts (GET /sessions
lists the ids), which `rlyard collect --sessions` turns into demonstrations. With `record_dir`
each session's conversations are also written to <record_dir>/<id>.json after every reply.

This module turns a validated request (`schema.py`) into a job for the scheduler and the job's
rows into OpenAI response bodies and stream chunks; `app.py` carries them over HTTP (Starlette + uvicorn).
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlyard.agent.loop import TemplateRenderer
from rlyard.agent.toolcalls import parse_tool_calls, render_tool_specs
from rlyard.engines.base import turn_seed
from rlyard.observe.store import write_atomic
from rlyard.serve.adapters import Adapters
from rlyard.serve.scheduler import HOLD_MARKER, Job, Row, Scheduler
from rlyard.serve.schema import ApiError, ChatRequest, CompletionRequest
from rlyard.serve.sessions import Plan, Session, with_system
from rlyard.types import SamplingParams


@dataclass
class Pending:
    """A request whose job the scheduler runs; what is needed to answer it once its rows are done."""

    kind: str  # "chat" | "completion"
    request: ChatRequest | CompletionRequest
    job: Job
    plan: Plan | None  # session requests: how the prompt extends the session
    session: Session | None
    tools: list[dict] | None = None  # chat: the tools rendered into the prompt (None: no tool parsing)
    echo: str = ""  # completions with echo: the prompt text, shown before each reply
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))


class RlyardServer:
    def __init__(self, engine, tokenizer, model_name: str, stop_token_ids: tuple[int, ...], max_tokens_default: int = 256,
                 record_dir: str | Path | None = None, context_window: int | None = None):
        """`context_window` (prompt + reply tokens) defaults to the engine model's
        max_position_embeddings; requests that do not fit are refused before generating."""
        self.engine, self.tokenizer, self.model_name = engine, tokenizer, model_name
        self.stop_token_ids, self.max_tokens_default = tuple(stop_token_ids), max_tokens_default
        self.renderer = TemplateRenderer(tokenizer, self.stop_token_ids)
        self.stop_token_ids = self.renderer.stop_token_ids  # with the template's end of message (Phi-3's <|end|>)
        self.end_of_turn = self.renderer.reply_stop_id()
        self.sessions: dict[str, Session] = {}
        self.record_dir = Path(record_dir) if record_dir is not None else None
        self.context_window = context_window or model_context_window(engine)
        if self.context_window is None:
            raise ValueError("the engine's model has no max_position_embeddings: pass context_window")
        self.adapters = Adapters(engine, model_name)  # POST /v1/load_lora_adapter; requests name them as `model`
        self.scheduler = Scheduler(engine, self.adapters.activate)

    def record(self, session: Session) -> None:
        """Write the session's conversations to <record_dir>/<id>.json (temp file + rename: a
        reader never sees half a file), so they outlive the server process."""
        if self.record_dir is None:
            return
        self.record_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.record_dir / f"{session.id}.json", json.dumps(session.export()).encode())

    def session(self, session_id: str) -> Session:
        return self.sessions.setdefault(session_id, Session(session_id))

    def models(self) -> dict[str, Any]:
        served = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "rlyard"}
        return {"object": "list", "data": [served, *self.adapters.models()]}

    def model(self, model_id: str) -> dict[str, Any]:
        """`GET /v1/models/{id}`: clients check a model exists before they use it."""
        for row in self.models()["data"]:
            if row["id"] == model_id:
                return row
        raise ApiError(404, f"The model '{model_id}' does not exist (this server serves '{self.model_name}')", "model",
                       "model_not_found")

    def health(self) -> dict[str, Any]:
        """What a load balancer or a harness waits on: the server answers and serves its model."""
        return {"status": "ok", "model": self.model_name, "policy_version": getattr(self.engine, "policy_version", None)}

    # ------------------------------------------------------------------ starting a request
    def check_model(self, request: ChatRequest | CompletionRequest) -> None:
        if request.model != self.model_name and request.model not in self.adapters.names():
            raise ApiError(404, f"The model '{request.model}' does not exist (this server serves '{self.model_name}')",
                           "model", "model_not_found")

    def sampling(self, request: ChatRequest | CompletionRequest, prompt_length: int, prompt_field: str) -> SamplingParams:
        room = self.context_window - prompt_length
        if room < 1:
            raise ApiError(400, f"the prompt has {prompt_length} tokens; the context window is {self.context_window} "
                                "tokens, with at least one for the reply", prompt_field, "context_length_exceeded")
        extra_stops = tuple(request.stop_token_ids or ())
        if any(not 0 <= t < len(self.tokenizer) for t in extra_stops):
            raise ApiError(400, f"'stop_token_ids' must be ids of the vocabulary ({len(self.tokenizer)} tokens)", "stop_token_ids")
        asked = getattr(request, "max_completion_tokens", None) or request.max_tokens
        if asked is not None and asked > room:
            name = "max_completion_tokens" if getattr(request, "max_completion_tokens", None) else "max_tokens"
            raise ApiError(400, f"'{name}' is {asked}, but the prompt's {prompt_length} tokens leave {room} of the "
                                f"{self.context_window}-token context window", name, "context_length_exceeded")
        return SamplingParams(temperature=1.0 if request.temperature is None else request.temperature,
                              top_p=1.0 if request.top_p is None else request.top_p, top_k=request.top_k or 0,
                              max_new_tokens=asked or min(self.max_tokens_default, room),
                              stop_token_ids=tuple(sorted(set(self.stop_token_ids + extra_stops))), seed=request.seed)

    def _job(self, loop, prompt: list[int], request, params: SamplingParams, hold: str = "") -> Job:
        rows = [Row(self.tokenizer, request.stop, params.stop_token_ids, params.max_new_tokens, hold) for _ in range(request.n)]
        return Job(prompt, params, rows, loop, model=request.model)

    def start_chat(self, request: ChatRequest, session: Session | None, loop) -> Pending:
        self.check_model(request)
        if session is not None and request.n != 1:
            raise ApiError(400, "session mode records one conversation: 'n' must be 1", "n")
        messages = [{**m.model_dump(exclude_none=True), "content": m.content or ""} for m in request.messages]
        tools = [t.model_dump(exclude_none=True) for t in request.tools] if request.tools and request.tool_choice != "none" else None
        extra = render_tool_specs(tools, "hermes") if tools else ""
        if session is not None:
            plan = session.plan_chat(self.renderer, messages, extra, self.end_of_turn)
            prompt = plan.prompt
        else:
            plan, prompt = None, self.renderer.prompt(with_system(messages, extra))
        params = self.sampling(request, len(prompt), "messages")
        if session is not None:  # more turns follow: the engine may keep this sequence's cache
            params = replace(params, cache_prefix=True, seed=session_turn_seed(session, params.seed))
        job = self._job(loop, prompt, request, params, HOLD_MARKER if tools else "")
        self.scheduler.submit(job)
        return Pending("chat", request, job, plan, session, tools)

    def start_completion(self, request: CompletionRequest, session: Session | None, loop) -> Pending:
        self.check_model(request)
        if session is not None and request.n != 1:
            raise ApiError(400, "session mode records one sequence: 'n' must be 1", "n")
        prompt = request.prompt
        if isinstance(prompt, list) and max(prompt) >= len(self.tokenizer):
            raise ApiError(400, f"token id {max(prompt)} is outside the vocabulary ({len(self.tokenizer)} tokens)", "prompt")
        if session is not None:
            plan = session.plan_completion(self.tokenizer, prompt)
            ids = plan.prompt
        else:
            plan, ids = None, prompt if isinstance(prompt, list) else self.tokenizer(prompt, add_special_tokens=False).input_ids
        if not ids:
            raise ApiError(400, "the prompt has no tokens", "prompt")
        params = self.sampling(request, len(ids), "prompt")
        if session is not None:
            params = replace(params, seed=session_turn_seed(session, params.seed))
        job = self._job(loop, ids, request, params)
        self.scheduler.submit(job)
        echo = (prompt if isinstance(prompt, str) else self.tokenizer.decode(prompt)) if request.echo else ""
        return Pending("completion", request, job, plan, session, echo=echo)

    # ------------------------------------------------------------------ answering it
    def finish(self, pending: Pending) -> dict[str, Any]:
        """The whole response body; records the reply in the session (a reply is recorded once
        it has been delivered whole, so an abandoned request leaves the session as it was)."""
        choices = [self._chat_choice(pending, i, row) if pending.kind == "chat" else self._text_choice(pending, i, row)
                   for i, row in enumerate(pending.job.rows)]
        if pending.session is not None:
            row, params = pending.job.rows[0], pending.job.params
            sampling = {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
                        "max_tokens": params.max_new_tokens}
            message = choices[0]["message"] if pending.kind == "chat" else None
            version = pending.job.policy_version if pending.job.policy_version is not None else -1
            pending.session.record(pending.plan, row.tokens, row.logprobs, version, sampling, row.finish, row.text, message)
            self.record(pending.session)
        used = sum(len(row.tokens) for row in pending.job.rows)
        prompt = len(pending.job.prompt)
        return {"id": self._id(pending), "object": "chat.completion" if pending.kind == "chat" else "text_completion",
                "created": pending.created, "model": pending.request.model, "choices": choices,
                "usage": {"prompt_tokens": prompt, "completion_tokens": used, "total_tokens": prompt + used}}

    def _id(self, pending: Pending) -> str:
        return ("chatcmpl-" if pending.kind == "chat" else "cmpl-") + pending.id

    def _chat_choice(self, pending: Pending, index: int, row: Row) -> dict[str, Any]:
        message, finish = {"role": "assistant", "content": row.text}, row.finish
        if pending.tools:
            parsed = parse_tool_calls(row.text, "hermes", pending.tools)
            calls = parsed.calls[:1] if pending.request.parallel_tool_calls is False else parsed.calls
            if calls:
                message = {"role": "assistant", "content": parsed.text or None, "tool_calls": [
                    {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                     "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in calls]}
                finish = "tool_calls"
        logprobs = {"content": self._token_logprobs(row.tokens, row.logprobs)} if pending.request.logprobs else None
        return {"index": index, "message": message, "finish_reason": finish, "logprobs": logprobs}

    def _text_choice(self, pending: Pending, index: int, row: Row) -> dict[str, Any]:
        logprobs = None
        if pending.request.logprobs is not None:
            logprobs = {"tokens": self._text_tokens(pending, row.tokens), "token_logprobs": list(row.logprobs), "top_logprobs": None}
        choice = {"index": index, "text": pending.echo + row.text, "finish_reason": row.finish, "logprobs": logprobs}
        if pending.request.return_token_ids:
            choice |= {"token_ids": list(row.tokens), "prompt_token_ids": list(pending.job.prompt)}
        return choice

    def _text_tokens(self, pending: Pending, tokens: list[int]) -> list[str]:
        """Completions' logprob tokens: their text, or with `return_tokens_as_token_ids` vLLM's
        "token_id:<id>" (a token's text need not decode alone, nor map back to one id)."""
        if pending.request.return_tokens_as_token_ids:
            return [f"token_id:{t}" for t in tokens]
        return [self.tokenizer.decode([t]) for t in tokens]

    def _token_logprobs(self, tokens: list[int], logprobs: list[float]) -> list[dict[str, Any]]:
        texts = [self.tokenizer.decode([t]) for t in tokens]
        return [{"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []} for text, lp in zip(texts, logprobs)]

    # ------------------------------------------------------------------ streaming
    def _chunk(self, pending: Pending, choice: dict[str, Any]) -> dict[str, Any]:
        kind = "chat.completion.chunk" if pending.kind == "chat" else "text_completion"
        return {"id": self._id(pending), "object": kind, "created": pending.created, "model": pending.request.model, "choices": [choice]}

    def opening_chunks(self, pending: Pending) -> list[dict[str, Any]]:
        if pending.kind == "chat":
            return [self._chunk(pending, {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None})
                    for i in range(len(pending.job.rows))]
        return [self._chunk(pending, {"index": i, "text": pending.echo, "logprobs": None, "finish_reason": None})
                for i in range(len(pending.job.rows))] if pending.echo else []

    def token_chunk(self, pending: Pending, choice: int, delta: str, token: int, logprob: float) -> dict[str, Any] | None:
        """The chunk for one sampled token: its new text and, when asked, its logprob."""
        wants_logprobs = bool(pending.request.logprobs) or (pending.kind == "completion" and pending.request.logprobs is not None)
        if not delta and not wants_logprobs and not (pending.kind == "completion" and pending.request.return_token_ids):
            return None
        if pending.kind == "chat":
            logprobs = {"content": self._token_logprobs([token], [logprob])} if wants_logprobs else None
            return self._chunk(pending, {"index": choice, "delta": {"content": delta}, "logprobs": logprobs, "finish_reason": None})
        logprobs = {"tokens": self._text_tokens(pending, [token]), "token_logprobs": [logprob], "top_logprobs": None} if wants_logprobs else None
        ids = {"token_ids": [token]} if pending.request.return_token_ids else {}
        return self._chunk(pending, {"index": choice, "text": delta, "logprobs": logprobs, "finish_reason": None, **ids})

    def closing_chunks(self, pending: Pending) -> list[dict[str, Any]]:
        """What is left of each choice (held-back text, tool calls), its finish reason, and the usage."""
        body, chunks = self.finish(pending), []
        for row, choice in zip(pending.job.rows, body["choices"]):
            index = choice["index"]
            if pending.kind == "chat":
                calls = choice["message"].get("tool_calls")
                delta = {"tool_calls": [{**c, "index": k} for k, c in enumerate(calls)]} if calls else {"content": row.unshown()}
                if calls or delta["content"]:
                    chunks.append(self._chunk(pending, {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}))
                chunks.append(self._chunk(pending, {"index": index, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}))
            else:
                chunks.append(self._chunk(pending, {"index": index, "text": row.unshown(), "logprobs": None,
                                                    "finish_reason": choice["finish_reason"]}))
        options = pending.request.stream_options
        if options is not None and options.include_usage:
            chunks.append({**self._chunk(pending, {}), "choices": [], "usage": body["usage"]})
        return chunks


def session_turn_seed(session: Session, seed: int | None) -> int | None:
    """A harness sends its one seed on every call: each turn of the session samples its own draws."""
    return turn_seed(seed, sum(segment.turns for segment in session.segments))


def model_context_window(engine) -> int | None:
    config = getattr(getattr(engine, "model", None), "config", None)
    if config is None:
        return None
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    return getattr(text, "max_position_embeddings", None)
