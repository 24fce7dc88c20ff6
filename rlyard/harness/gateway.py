"""An in-process `rlyard serve` over the run's engine, for the harness episodes of one rollout.

The only module of rlyard/harness that knows how the server is started; everything else talks
to it over HTTP (its contract: `/sessions/<id>/v1/...` records the tokens a session samples,
`GET /sessions/<id>/trajectories` returns them as `{"trajectories": [Trajectory.to_dict()]}`).
It binds port 0 on 127.0.0.1 (a free port, reachable from this machine only: the sandbox has no
network, so a model-written command can never call the gateway itself).

The server never calls the engine itself: its generate calls are relayed to the thread that runs
the rollout (`Relay.serve_until`), which makes them exactly as the agent loop would. That thread
may hold the weights for its whole rollout (async mode's `partial_rollouts=false` pins them), and
only it can generate under that hold: a call from the server's own thread would wait behind the
weight update that waits for the hold, which waits for the harnesses, which wait for that call.
"""
from __future__ import annotations

import inspect
import json
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
import urllib.error
import urllib.request
from types import TracebackType
from typing import TypeVar

from rlyard.serve import RlyardServer, serve
from rlyard.types import Trajectory

MODEL_NAME = "policy"
T = TypeVar("T")


class GatewayError(RuntimeError):
    """The gateway did not answer as its contract says: an infra failure, not the policy's."""


@dataclass
class Call:
    args: tuple
    kwargs: dict
    done: threading.Event = field(default_factory=threading.Event)
    result: object = None
    error: BaseException | None = None


class Relay:
    """The engine as the server sees it: each generate call waits for the rollout's thread to make it."""

    def __init__(self, engine):
        self.engine = engine
        self.calls: queue.Queue[Call] = queue.Queue()
        self.closed = False
        try:  # offer the server the engine's per-step hook exactly when the engine has one
            hooked = "on_step" in inspect.signature(engine.generate).parameters
        except (TypeError, ValueError):
            hooked = False
        self.generate = self._generate_hooked if hooked else self._generate

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def _generate(self, prompts, params, n: int = 1):
        return self._relay((prompts, params, n), {})

    def _generate_hooked(self, prompts, params, n: int = 1, on_step=None):
        return self._relay((prompts, params, n), {"on_step": on_step} if on_step is not None else {})

    def _relay(self, args: tuple, kwargs: dict):
        call = Call(args, kwargs)
        self.calls.put(call)
        while not call.done.wait(0.1):
            if self.closed:
                raise GatewayError("the rollout stopped serving the engine")
        if call.error is not None:
            raise call.error
        return call.result

    def serve_until(self, finished: Callable[[], bool]) -> None:
        """Make the queued engine calls on this thread until `finished()`. An engine error fails the
        call that met it and is raised here once the harnesses are done (as the agent loop would
        raise it); afterwards, or on any way out, waiting calls fail instead of hanging."""
        error: BaseException | None = None
        try:
            while not finished():
                try:
                    call = self.calls.get(timeout=0.02)
                except queue.Empty:
                    continue
                try:
                    call.result = self.engine.generate(*call.args, **call.kwargs)
                except BaseException as e:  # noqa: BLE001 - handed to the caller, raised below
                    call.error, error = e, error or e
                finally:
                    call.done.set()
        finally:
            self.closed = True
        if error is not None:
            raise error


class Gateway:
    """`with Gateway(engine, tokenizer, stop_ids, window) as gw:` serves `gw.base_url(session_id)`;
    the caller's thread makes the engine calls while the harnesses play (`serve_while`, or
    `relay.serve_until` for several at once)."""

    def __init__(self, engine, tokenizer, stop_token_ids: tuple[int, ...], context_window: int, max_tokens_default: int = 256):
        """`context_window`: the episode's token budget (agent.max_total_tokens). A server that checks
        it refuses a request that would outgrow it, which a harness sees as its model's context
        window being full (how an episode ends at the budget)."""
        window = {"context_window": context_window} if "context_window" in inspect.signature(RlyardServer).parameters else {}
        self.relay = Relay(engine)
        self.app = RlyardServer(self.relay, tokenizer, MODEL_NAME, tuple(stop_token_ids), max_tokens_default=max_tokens_default, **window)
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

    def serve_while(self, fn: Callable[..., T], *args) -> T:
        """`fn(*args)` (a harness, a client) in a thread while this thread makes its engine calls."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlyard-harness") as pool:
            future = pool.submit(fn, *args)
            self.relay.serve_until(future.done)
            return future.result()

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
