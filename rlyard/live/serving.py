"""The serving side of a live run: a server that knows groups.

The engine is the asynchronous trainer's `SharedEngine` (orchestrate/workers.py): the server's
scheduler makes one engine call at a time; the learner's weight update waits for the call in
flight and goes in before the next one (a waiting update holds new calls back, so a busy server
cannot starve it). Every completion carries the version that sampled all of its tokens: an
in-flight request finishes on the weights it started with, and a multi-turn session records each
turn's version.

`LiveServer`: `rlyard serve` plus what the learner needs to know about sessions. A request's
`metadata` (`group`, `task`) is kept per session; a session request with `n > 1` (refused by
plain `rlyard serve`) becomes n sessions `<id>.0` ... `<id>.<n-1>`, one per choice, which form a
GRPO group named `<id>` (or `metadata.group`); each is rewarded on its own. A rewarded session is
closed: a later request naming it gets a 409.
"""
from __future__ import annotations

from collections.abc import Callable

from rlyard.agent.toolcalls import render_tool_specs
from rlyard.serve import RlyardServer, Session
from rlyard.serve.schema import ApiError, ChatRequest
from rlyard.serve.server import Pending


class LiveServer(RlyardServer):
    def __init__(self, *args, register: Callable[[str, dict[str, str]], None], closed: Callable[[str], bool], **kwargs):
        """`register(session_id, metadata)` tells the learner a session exists (and its group);
        `closed(session_id)` says whether it was rewarded already."""
        super().__init__(*args, **kwargs)
        self.register, self.closed = register, closed
        self.metadata: dict[str, dict[str, str]] = {}  # session id -> its request metadata (group, task)

    def session(self, session_id: str) -> Session:
        if self.closed(session_id):
            raise ApiError(409, f"session {session_id!r} was rewarded and is closed; start a new session id", "session_id",
                           "session_closed")
        return super().session(session_id)

    def _remember(self, session_id: str, metadata: dict[str, str]) -> None:
        self.metadata[session_id] = {**self.metadata.get(session_id, {}), **metadata}
        self.register(session_id, self.metadata[session_id])

    def start_chat(self, request: ChatRequest, session: Session | None, loop) -> Pending:
        metadata = dict(request.metadata or {})
        if session is None or request.n == 1:
            if session is not None:
                self._remember(session.id, metadata)
            return super().start_chat(request, session, loop)
        # n > 1 in a session: one fresh session per choice, a GRPO group
        if session.segments:
            raise ApiError(400, "'n' > 1 starts a group: send it as the first request of a session", "n")
        children = [f"{session.id}.{i}" for i in range(request.n)]
        for child in children:
            if self.closed(child) or self.sessions.get(child, Session(child)).segments:
                raise ApiError(409, f"session {child!r} (choice of an n > 1 request) exists already", "n")
        self.sessions.pop(session.id, None)  # the parent records nothing itself
        pending = super().start_chat(request, None, loop)
        messages = [{**m.model_dump(exclude_none=True), "content": m.content or ""} for m in request.messages]
        tools = pending.tools
        extra = render_tool_specs(tools, "hermes") if tools else ""
        group = metadata.get("group", session.id)
        pending.children = []  # (session, plan) per choice: recorded in finish
        for child in children:
            self._remember(child, {**metadata, "group": group})
            child_session = super().session(child)
            pending.children.append((child_session, child_session.plan_chat(self.renderer, messages, extra, self.end_of_turn)))
        return pending

    def finish(self, pending: Pending) -> dict:
        body = super().finish(pending)
        children = getattr(pending, "children", None)
        if children:
            params = pending.job.params
            sampling = {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
                        "max_tokens": params.max_new_tokens}
            version = pending.job.policy_version if pending.job.policy_version is not None else -1
            for (session, plan), row, choice in zip(children, pending.job.rows, body["choices"]):
                session.record(plan, row.tokens, row.logprobs, version, sampling, row.finish, row.text, choice["message"])
                self.record(session)
        return body

    def start_completion(self, request, session, loop) -> Pending:
        if session is not None:
            self._remember(session.id, dict(request.metadata or {}))
        return super().start_completion(request, session, loop)
