"""The HTTP routes of `rlyard serve` (Starlette), streaming, and abandoned requests.

Every /v1/... route also exists under /sessions/<id>/v1/..., where the calls are recorded
(but vLLM's runtime LoRA calls, /v1/load_lora_adapter and /v1/unload_lora_adapter: an adapter
belongs to the server, not to a session).
A client that goes away stops its generation: a stream is cancelled by Starlette when the
client disconnects, and a plain request waits for either its reply or the disconnect; either
way the job's rows leave the engine's batch at the next decode step (or the job never starts),
so an abandoned long reply does not hold up the requests behind it.
"""
from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from rlyard.serve.schema import ApiError, ChatRequest, CompletionRequest, LoadAdapter, UnloadAdapter, parse
from rlyard.serve.server import Pending, RlyardServer
from rlyard.serve.sessions import Session

SESSION_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
CLIENT_CLOSED = 499  # nginx's code for "the client closed the request": nobody reads it


def build_app(server: RlyardServer, extra_routes: list[Route] = ()) -> Starlette:
    """The routes over `server`; `extra_routes` come first (`rlyard serve --learn` adds its reward and admin routes)."""
    def session_of(request: Request):
        session_id = request.path_params.get("session_id")
        if session_id is None:
            return None
        if not SESSION_ID.match(session_id):
            raise ApiError(400, "a session id is 1 to 128 letters, digits, '_', '.' or '-'", "session_id")
        return server.session(session_id)

    def existing(request: Request):
        """The session, or an empty one (not kept): an episode whose agent never called has recorded nothing."""
        session_id = request.path_params["session_id"]
        if not SESSION_ID.match(session_id):
            raise ApiError(400, "a session id is 1 to 128 letters, digits, '_', '.' or '-'", "session_id")
        return server.sessions.get(session_id) or Session(session_id)

    async def models(request: Request) -> Response:
        return JSONResponse(server.models())

    async def model(request: Request) -> Response:
        return JSONResponse(server.model(request.path_params["model_id"]))

    async def health(request: Request) -> Response:
        return JSONResponse(server.health())

    async def chat(request: Request) -> Response:
        body = parse(ChatRequest, await request.body())
        pending = server.start_chat(body, session_of(request), asyncio.get_running_loop())
        return await respond(server, pending, request)

    async def completions(request: Request) -> Response:
        body = parse(CompletionRequest, await request.body())
        pending = server.start_completion(body, session_of(request), asyncio.get_running_loop())
        return await respond(server, pending, request)

    async def load_adapter(request: Request) -> Response:
        """vLLM's runtime LoRA call; its answer is plain text too. Reading the folder is blocking work."""
        body = parse(LoadAdapter, await request.body())
        await run_in_threadpool(server.adapters.load, body.lora_name, body.lora_path, body.load_inplace)
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    async def unload_adapter(request: Request) -> Response:
        body = parse(UnloadAdapter, await request.body())
        server.adapters.unload(body.lora_name)
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")

    async def sessions(request: Request) -> Response:
        return JSONResponse({"sessions": sorted(i for i, s in server.sessions.items() if s.segments)})

    async def trajectories(request: Request) -> Response:
        session = existing(request)
        return JSONResponse({"session": session.id, "trajectories": [t.to_dict() for t in session.trajectories()]})

    async def messages(request: Request) -> Response:
        return JSONResponse(existing(request).export())

    routes = []
    for prefix in ("", "/sessions/{session_id}"):
        routes += [Route(f"{prefix}/v1/models", models, methods=["GET"]),
                   Route(f"{prefix}/v1/models/{{model_id:path}}", model, methods=["GET"]),  # ids may hold '/' (org/name)
                   Route(f"{prefix}/v1/chat/completions", chat, methods=["POST"]),
                   Route(f"{prefix}/v1/completions", completions, methods=["POST"])]
    routes += [Route("/health", health, methods=["GET"]), Route("/v1/health", health, methods=["GET"]),
               Route("/v1/load_lora_adapter", load_adapter, methods=["POST"]),
               Route("/v1/unload_lora_adapter", unload_adapter, methods=["POST"]),
               Route("/sessions", sessions, methods=["GET"]),
               Route("/sessions/{session_id}/trajectories", trajectories, methods=["GET"]),
               Route("/sessions/{session_id}/messages", messages, methods=["GET"])]
    handlers = {ApiError: api_error, HTTPException: http_error, Exception: server_error}
    return Starlette(routes=[*extra_routes, *routes], exception_handlers=handlers)


async def respond(server: RlyardServer, pending: Pending, request: Request) -> Response:
    if pending.request.stream:
        return StreamingResponse(stream(server, pending), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    done = asyncio.ensure_future(until_done(pending))
    gone = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait({done, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not done.done():
            pending.job.cancel()
            done.cancel()
    if not done.done() or done.cancelled():
        return Response(status_code=CLIENT_CLOSED)
    done.result()  # raises the engine's error, if any
    return JSONResponse(server.finish(pending))


async def until_done(pending: Pending) -> None:
    while True:
        event = await pending.job.events.get()
        if event[0] == "done":
            if event[2] is not None:
                raise event[2]
            return


async def disconnected(request: Request) -> None:
    """Returns when the client hangs up (the body is read: the next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def stream(server: RlyardServer, pending: Pending) -> AsyncIterator[str]:
    """Server-sent events, one chunk per sampled token (chunks of an engine without the step
    hook arrive together at the end). A stream Starlette cancels, because the client left,
    cancels its job in `finally`."""
    try:
        for chunk in server.opening_chunks(pending):
            yield sse(chunk)
        while True:
            event = await pending.job.events.get()
            if event[0] == "token":
                chunk = server.token_chunk(pending, *event[1:])
                if chunk is not None:
                    yield sse(chunk)
                continue
            if event[2] is not None:  # the engine failed: OpenAI streams errors as an error object
                yield sse({"error": {"message": f"{type(event[2]).__name__}: {event[2]}", "type": "server_error",
                                     "param": None, "code": None}})
                return
            for chunk in server.closing_chunks(pending):
                yield sse(chunk)
            yield "data: [DONE]\n\n"
            return
    finally:
        pending.job.cancel()  # a no-op once the job is done


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


async def api_error(request: Request, exc: ApiError) -> Response:
    return JSONResponse(exc.body(), status_code=exc.status)


async def http_error(request: Request, exc: HTTPException) -> Response:
    """Unknown routes and methods, in OpenAI's error shape too."""
    message = f"no route {request.method} {request.url.path}" if exc.status_code in (404, 405) else str(exc.detail)
    return JSONResponse(ApiError(exc.status_code, message).body(), status_code=exc.status_code)


async def server_error(request: Request, exc: Exception) -> Response:
    return JSONResponse(ApiError(500, f"{type(exc).__name__}: {exc}", kind="server_error").body(), status_code=500)


class HttpServer:
    """What `serve` returns: uvicorn on a socket bound at once (so port 0 has its number before
    serving), with the calls of socketserver (`serve_forever`, `shutdown`, `server_close`,
    `server_address`) that the CLI and tests use."""

    def __init__(self, server: RlyardServer, host: str, port: int, extra_routes: list[Route] = ()):
        import uvicorn

        self.app = build_app(server, extra_routes)
        self.socket = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.server_address = self.socket.getsockname()[:2]
        # log_config=None: leave the process's logging alone; errors still reach stderr
        config = uvicorn.Config(self.app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=2)
        self.uvicorn = uvicorn.Server(config)
        self.running, self.stopped = threading.Event(), threading.Event()

    def serve_forever(self) -> None:
        self.running.set()
        try:
            self.uvicorn.run(sockets=[self.socket])
        finally:
            self.stopped.set()

    def shutdown(self) -> None:
        self.uvicorn.should_exit = True
        if self.running.is_set():
            self.stopped.wait(timeout=30)

    def server_close(self) -> None:
        self.socket.close()

    def start(self) -> HttpServer:
        """Serve from a daemon thread (an embedding program, tests); returns once it accepts requests."""
        threading.Thread(target=self.serve_forever, name="rlyard-serve-http", daemon=True).start()
        deadline = time.monotonic() + 30
        while not self.uvicorn.started and not self.stopped.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def close(self) -> None:
        self.shutdown()
        self.server_close()


def serve(server: RlyardServer, host: str = "127.0.0.1", port: int = 8000, extra_routes: list[Route] = ()) -> HttpServer:
    """Bind and return the HTTP server (call `serve_forever`, or run it in a thread)."""
    return HttpServer(server, host, port, extra_routes)
