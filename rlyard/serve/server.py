"""`rlyard serve`: an OpenAI-compatible HTTP server over any rlyard engine.

Endpoints: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (tools in the
Hermes <tool_call> convention, streaming or not). Under /sessions/<id>/v1/... every call is
recorded token by token, so an agent harness pointed at that base URL can be trained by rlyard
unchanged: GET /sessions/<id>/trajectories returns what it did as rlyard Trajectories, and
GET /sessions/<id>/messages its conversations with the exact reply texts (GET /sessions lists
the ids), which `rlyard collect --sessions` turns into demonstrations. With `record_dir` each
session's conversations are also written to <record_dir>/<id>.json after every reply.
Standard library only (ThreadingHTTPServer); one engine call at a time.
"""
from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from rlyard.agent.loop import TemplateRenderer
from rlyard.agent.toolcalls import parse_tool_calls, render_tool_specs
from rlyard.observe.store import write_atomic
from rlyard.serve.sessions import Session, with_system
from rlyard.types import SamplingParams

SESSION_PATH = re.compile(r"^/sessions/([A-Za-z0-9_.-]{1,128})(/.*)$")


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


class RlyardServer:
    def __init__(self, engine, tokenizer, model_name: str, stop_token_ids: tuple[int, ...], max_tokens_default: int = 256,
                 record_dir: str | Path | None = None):
        self.engine, self.tokenizer, self.model_name = engine, tokenizer, model_name
        self.stop_token_ids, self.max_tokens_default = stop_token_ids, max_tokens_default
        self.renderer = TemplateRenderer(tokenizer, stop_token_ids)
        self.sessions: dict[str, Session] = {}
        self.engine_lock = threading.Lock()
        self.record_dir = Path(record_dir) if record_dir is not None else None

    def record(self, session: Session) -> None:
        """Write the session's conversations to <record_dir>/<id>.json (temp file + rename: a
        reader never sees half a file), so they outlive the server process."""
        if self.record_dir is None:
            return
        self.record_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.record_dir / f"{session.id}.json", json.dumps(session.export()).encode())

    def session(self, session_id: str) -> Session:
        return self.sessions.setdefault(session_id, Session(session_id))

    def sampling(self, body: dict) -> SamplingParams:
        def number(key, default, kind=float):
            value = body.get(key, default)
            if value is None:
                return default
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ApiError(400, f"'{key}' must be a number, got {value!r}", key)
            return kind(value)

        max_tokens = number("max_completion_tokens", None, int) or number("max_tokens", self.max_tokens_default, int)
        if max_tokens < 1:
            raise ApiError(400, "'max_tokens' must be at least 1", "max_tokens")
        stop = body.get("stop") or []
        stop_ids = list(self.stop_token_ids)
        for text in [stop] if isinstance(stop, str) else stop:
            ids = self.tokenizer(text, add_special_tokens=False).input_ids
            if len(ids) == 1:
                stop_ids.append(ids[0])
        seed = body.get("seed")
        return SamplingParams(temperature=number("temperature", 1.0), top_p=number("top_p", 1.0), top_k=0,
                              max_new_tokens=max_tokens, stop_token_ids=tuple(stop_ids), seed=int(seed) if seed is not None else None)

    def generate(self, prompt_ids: list[int], params: SamplingParams, n: int):
        with self.engine_lock:
            return self.engine.generate([prompt_ids], params, n=n)[0]

    def chat(self, body: dict, session: Session | None) -> dict:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise ApiError(400, "'messages' must be a non-empty list of {role, content} objects", "messages")
        messages = [{**m, "content": m.get("content") or ""} for m in messages]
        tools = body.get("tools") or None
        n = int(body.get("n") or 1)
        if session is not None and n != 1:
            raise ApiError(400, "session mode records one conversation: 'n' must be 1", "n")
        extra = render_tool_specs(tools, "hermes") if tools else ""
        params = self.sampling(body)
        with session.lock if session else contextlib.nullcontext():
            if session is not None:
                prompt = session.prompt_tokens(self.renderer, messages, extra)
            else:
                prompt = self.renderer.prompt(with_system(messages, extra))
            completions = self.generate(prompt, params, n)
            choices = []
            for index, completion in enumerate(completions):
                text = self.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
                message, finish = {"role": "assistant", "content": text}, ("stop" if completion.finish_reason == "stop" else "length")
                if tools:
                    parsed = parse_tool_calls(text, "hermes", tools)
                    if parsed.calls:
                        message = {"role": "assistant", "content": parsed.text or None, "tool_calls": [
                            {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in parsed.calls]}
                        finish = "tool_calls"
                if session is not None:
                    session.record_reply(completion, message, text)
                choices.append({"index": index, "message": message, "finish_reason": finish,
                                "logprobs": {"content": [{"token": self.tokenizer.decode([t]), "logprob": lp}
                                                         for t, lp in zip(completion.token_ids, completion.logprobs)]} if body.get("logprobs") else None})
            if session is not None:
                self.record(session)
        completion_tokens = sum(len(c.token_ids) for c in completions)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()), "model": self.model_name,
                "choices": choices, "usage": {"prompt_tokens": len(prompt), "completion_tokens": completion_tokens,
                                              "total_tokens": len(prompt) + completion_tokens}}

    def completions(self, body: dict) -> dict:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt_ids = prompt
        elif isinstance(prompt, str) and prompt:
            prompt_ids = self.tokenizer(prompt, add_special_tokens=False).input_ids
        else:
            raise ApiError(400, "'prompt' must be a non-empty string or a list of token ids", "prompt")
        completions = self.generate(prompt_ids, self.sampling(body), int(body.get("n") or 1))
        choices = [{"index": i, "text": self.tokenizer.decode(c.token_ids, skip_special_tokens=True),
                    "finish_reason": "stop" if c.finish_reason == "stop" else "length",
                    "logprobs": {"tokens": [self.tokenizer.decode([t]) for t in c.token_ids], "token_logprobs": c.logprobs}
                    if body.get("logprobs") is not None else None} for i, c in enumerate(completions)]
        used = sum(len(c.token_ids) for c in completions)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()), "model": self.model_name,
                "choices": choices, "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": used, "total_tokens": len(prompt_ids) + used}}


def make_handler(server: RlyardServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: one line per request would flood a training log
            pass

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, error: ApiError) -> None:
            self._send(error.status, {"error": {"message": error.message, "type": "invalid_request_error", "param": error.param, "code": None}})

        def _route(self) -> tuple[Session | None, str]:
            match = SESSION_PATH.match(self.path)
            return (server.session(match.group(1)), match.group(2)) if match else (None, self.path)

        def do_GET(self):
            session, path = self._route()
            if path.rstrip("/") == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": server.model_name, "object": "model", "created": 0, "owned_by": "rlyard"}]})
            if session is not None and path.rstrip("/") == "/trajectories":
                return self._send(200, {"session": session.id, "trajectories": [t.to_dict() for t in session.trajectories()]})
            if session is not None and path.rstrip("/") == "/messages":
                return self._send(200, session.export())
            if session is None and path.rstrip("/") == "/sessions":
                return self._send(200, {"sessions": sorted(i for i, s in list(server.sessions.items()) if s.segments)})
            self._error(ApiError(404, f"no route GET {self.path}"))

        def do_POST(self):
            session, path = self._route()
            try:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError as exc:
                    raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
                if path.rstrip("/") == "/v1/chat/completions":
                    result = server.chat(body, session)
                    return self._stream_chat(result) if body.get("stream") else self._send(200, result)
                if path.rstrip("/") == "/v1/completions":
                    return self._send(200, server.completions(body))
                raise ApiError(404, f"no route POST {self.path}")
            except ApiError as error:
                self._error(error)
            except Exception as exc:  # the server stays up; the client sees why
                self._error(ApiError(500, f"{type(exc).__name__}: {exc}"))

        def _stream_chat(self, result: dict) -> None:
            """Server-sent events. The reply is generated whole, then sent as one content delta."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            base = {"id": result["id"], "object": "chat.completion.chunk", "created": result["created"], "model": result["model"]}
            for choice in result["choices"]:
                message, index = choice["message"], choice["index"]
                delta = {"role": "assistant", "content": message.get("content")}
                if message.get("tool_calls"):
                    delta["tool_calls"] = [{**call, "index": k} for k, call in enumerate(message["tool_calls"])]
                for chunk in ({**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]},
                              {**base, "choices": [{"index": index, "delta": {}, "finish_reason": choice["finish_reason"]}]}):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


def serve(server: RlyardServer, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """Bind and return the HTTP server (call `serve_forever`, or run it in a thread)."""
    httpd = ThreadingHTTPServer((host, port), make_handler(server))
    httpd.daemon_threads = True
    return httpd
