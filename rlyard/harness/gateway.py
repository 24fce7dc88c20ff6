"""An in-process `rlyard serve` over the run's engine, for the harness episodes of one rollout.

The only module of rlyard/harness that knows how the server is started; everything else talks
to it over HTTP (its contract: `/sessions/<id>/v1/...` records the tokens a session samples,
`GET /sessions/<id>/trajectories` returns them as `{"trajectories": [Trajectory.to_dict()]}`).
It binds port 0 on 127.0.0.1 (a free port, reachable from this machine only: the sandbox has no
network, so a model-written command can never call the gateway itself).
"""
from __future__ import annotations

import inspect
import json
import threading
import urllib.error
import urllib.request
from types import TracebackType

from rlyard.serve import RlyardServer, serve
from rlyard.types import Trajectory

MODEL_NAME = "policy"


class GatewayError(RuntimeError):
    """The gateway did not answer as its contract says: an infra failure, not the policy's."""


class Gateway:
    """`with Gateway(engine, tokenizer, stop_ids) as gw:` serves `gw.base_url(session_id)`."""

    def __init__(self, engine, tokenizer, stop_token_ids: tuple[int, ...], context_window: int, max_tokens_default: int = 256):
        """`context_window`: the episode's token budget (agent.max_total_tokens). A server that checks
        it refuses a request that would outgrow it, which a harness sees as its model's context
        window being full (how an episode ends at the budget)."""
        window = {"context_window": context_window} if "context_window" in inspect.signature(RlyardServer).parameters else {}
        self.app = RlyardServer(engine, tokenizer, MODEL_NAME, tuple(stop_token_ids), max_tokens_default=max_tokens_default, **window)
        self.httpd = serve(self.app, "127.0.0.1", 0)
        self.root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="rlyard-gateway", daemon=True)

    def __enter__(self) -> "Gateway":
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    def base_url(self, session_id: str) -> str:
        return f"{self.root}/sessions/{session_id}/v1"

    def trajectories(self, session_id: str) -> list[Trajectory]:
        """What the session sampled, one Trajectory per continued conversation (segment)."""
        url = f"{self.root}/sessions/{session_id}/trajectories"
        try:
            with urllib.request.urlopen(url, timeout=60) as reply:
                rows = json.loads(reply.read())["trajectories"]
        except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
            raise GatewayError(f"GET {url} failed: {e}") from e
        return [Trajectory.from_dict(row) for row in rows]

    def forget(self, session_id: str) -> None:
        """Drop a collected session, so that a long run does not keep every episode in memory.
        The HTTP contract has no delete; the in-process server's session table is reached directly."""
        sessions = getattr(self.app, "sessions", None)
        if isinstance(sessions, dict):
            sessions.pop(session_id, None)
