"""The routes `rlyard serve --learn` adds: rewards in, versions managed. All need the API key.

- `POST /v1/sessions/{id}/reward` `{"reward": float, "components": {name: float}}`: the session's
  trajectories and reward are journaled (fsynced) and only then answered 200. The same reward
  again is answered 200 with `"duplicate": true` (a client that retries after a lost answer is
  safe); another reward for a rewarded session is a 409; a session that recorded no reply is a 404.
- `POST /v1/sessions/{id}/close` `{"task": id}` (optional when the session's `metadata.task`
  named it): the server grades the session's last reply with the family's verifier (with
  `env.reward`, those functions) on that task and journals the result like a posted reward.
- `POST /admin/rollback` `{"version": int}`: serve an earlier version's weights (a new version).
- `GET /admin/status`: policy version, rewards posted, pending, dropped, checkpoints kept.

The key comes as `Authorization: Bearer KEY` (what the openai client sends) or `X-API-Key: KEY`.
"""
from __future__ import annotations

import asyncio
import hmac
import math

from pydantic import Field, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rlyard.live.learner import LiveLearner
from rlyard.live.serving import LiveServer
from rlyard.serve.app import SESSION_ID
from rlyard.serve.schema import ApiError, Strict, parse


class RewardBody(Strict):
    reward: float
    components: dict[str, float] = Field(default_factory=dict)

    @field_validator("reward")
    @classmethod
    def finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class CloseBody(Strict):
    task: str | None = None


class RollbackBody(Strict):
    version: int = Field(ge=0)


def live_routes(server: LiveServer, learner: LiveLearner, api_key: str) -> list[Route]:
    if not api_key:
        raise ValueError("rlyard serve --learn needs an API key for its reward and admin routes")
    expected = api_key.encode()
    inflight: dict[str, asyncio.Future] = {}  # session id -> a post being journaled

    def check_key(request: Request) -> None:
        given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), expected):
            raise ApiError(401, "this route needs the server's API key (Authorization: Bearer KEY or X-API-Key: KEY)",
                           kind="authentication_error", code="invalid_api_key")

    def session_id(request: Request) -> str:
        sid = request.path_params["session_id"]
        if not SESSION_ID.match(sid):
            raise ApiError(400, "a session id is 1 to 128 letters, digits, '_', '.' or '-'", "session_id")
        return sid

    async def journal_reward(sid: str, reward: float, components: dict[str, float], source: str) -> Response:
        while sid in inflight:  # the same session posted twice at once: the second waits and is answered as a repeat
            await asyncio.shield(inflight[sid])
        entry = learner.journal.get(sid)
        if entry is not None:
            if entry.reward == reward and entry.components == components:
                learner.duplicates += 1
                return JSONResponse({"session": sid, "reward": entry.reward, "seq": entry.seq, "group": entry.group,
                                     "duplicate": True})
            raise ApiError(409, f"session {sid!r} already has reward {entry.reward} (components {entry.components}); "
                                "a reward cannot be changed", "reward", "already_rewarded")
        session = server.sessions.get(sid)
        trajectories = session.trajectories() if session is not None else []
        if not trajectories:
            raise ApiError(404, f"no session {sid!r} with a sampled reply on this server (unknown, or lost in a restart "
                                "before its reward was posted)", "session_id", "session_not_found")
        metadata = server.metadata.get(sid, {})
        done = asyncio.get_running_loop().create_future()
        inflight[sid] = done
        try:
            entry = await run_in_threadpool(learner.journal.append, sid, reward, components, metadata.get("group"),
                                            trajectories, source, {"task": metadata["task"]} if "task" in metadata else {})
        finally:
            inflight.pop(sid, None)
            done.set_result(None)
        server.sessions.pop(sid, None)
        server.metadata.pop(sid, None)
        learner.rewarded(entry)
        versions = sorted({v for t in trajectories for v, m in zip(t.policy_versions, t.loss_mask) if m})
        return JSONResponse({"session": sid, "reward": entry.reward, "seq": entry.seq, "group": entry.group,
                             "policy_versions": versions, "source": source, "duplicate": False})

    async def post_reward(request: Request) -> Response:
        check_key(request)
        sid = session_id(request)
        body = parse(RewardBody, await request.body())
        return await journal_reward(sid, body.reward, dict(body.components), "posted")

    async def close(request: Request) -> Response:
        check_key(request)
        sid = session_id(request)
        body = parse(CloseBody, await request.body())
        entry = learner.journal.get(sid)
        if entry is not None and entry.source == "grader":  # closed before: the same grade
            learner.duplicates += 1
            return JSONResponse({"session": sid, "reward": entry.reward, "seq": entry.seq, "group": entry.group, "duplicate": True})
        if entry is not None:
            raise ApiError(409, f"session {sid!r} was rewarded by its client already", "session_id", "already_rewarded")
        session = server.sessions.get(sid)
        segments = [s for s in session.segments if s.turns] if session is not None else []
        if not segments:
            raise ApiError(404, f"no session {sid!r} with a sampled reply on this server", "session_id", "session_not_found")
        task_id = body.task or server.metadata.get(sid, {}).get("task")
        if not task_id:
            raise ApiError(400, "name the task to grade against: {\"task\": ID} or the session's metadata.task", "task")
        task = learner.tasks.get(task_id)
        if task is None:
            raise ApiError(404, f"no task {task_id!r} in env {learner.config.env.name} (train or eval split)", "task", "task_not_found")
        verify = learner.c.family.verify
        if verify is None:
            raise ApiError(400, f"env {learner.config.env.name} grades episodes with their environment's state, not a reply; "
                                "post the reward instead", "task")
        last = segments[-1]
        reply = last.replies[max(last.replies)] if last.kind == "chat" and last.replies else last.text
        server.metadata.setdefault(sid, {})["task"] = task_id
        result = await run_in_threadpool(verify, reply, task)
        return await journal_reward(sid, float(result.value), {k: float(v) for k, v in result.components.items()}, "grader")

    async def rollback(request: Request) -> Response:
        check_key(request)
        body = parse(RollbackBody, await request.body())
        try:
            return JSONResponse(await run_in_threadpool(learner.rollback, body.version))
        except KeyError as error:
            raise ApiError(404, str(error.args[0]), "version", "version_not_found") from None

    async def status(request: Request) -> Response:
        check_key(request)
        return JSONResponse(learner.status())

    return [Route("/v1/sessions/{session_id}/reward", post_reward, methods=["POST"]),
            Route("/v1/sessions/{session_id}/close", close, methods=["POST"]),
            Route("/admin/rollback", rollback, methods=["POST"]),
            Route("/admin/status", status, methods=["GET"])]
