"""The viewer's HTTP side: JSON routes over the index and the run folder, and the static page.

Everything model-written reaches the page as JSON, which the page renders with textContent;
the Content-Security-Policy below forbids inline scripts and every outside origin as a
second wall. Files are served only from the package's static/ folder and, for a webdev
screenshot, only when the grader's path resolves inside the run folder.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import yaml
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from rlyard.observe.store import read_jsonl
from rlyard.observe.viewer.index import TrajectoryIndex

STATIC = Path(__file__).parent / "static"
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp", ".gif": "image/gif"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
LIVE_SECONDS = 120  # a run whose files changed this recently is shown as running


class RunFolder:
    """A run folder as the viewer reads it: its config, its metrics (cached on size) and the index."""

    def __init__(self, run_dir: Path, index: TrajectoryIndex) -> None:
        self.run_dir, self.index = run_dir.resolve(), index
        self._metrics: tuple[tuple[int, int], list[dict[str, Any]]] = ((-1, -1), [])

    def config(self) -> tuple[str, dict[str, Any]]:
        path = self.run_dir / "config.yaml"
        if not path.exists():
            return "", {}
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            parsed = None
        return text, parsed if isinstance(parsed, dict) else {}

    def metrics(self) -> list[dict[str, Any]]:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return []
        stat = path.stat()
        key = (stat.st_ino, stat.st_size)
        if key != self._metrics[0]:
            try:
                self._metrics = (key, read_jsonl(path))
            except ValueError:  # a corrupt line in the middle: show what the file held before
                return self._metrics[1]
        return self._metrics[1]

    def status(self, total_steps: int | None, last_step: int | None) -> str:
        changed = max((p.stat().st_mtime for p in (self.run_dir / "metrics.jsonl", self.index.jsonl) if p.exists()), default=0)
        if total_steps is not None and last_step is not None and last_step >= total_steps:
            return "finished"
        return "running" if time.time() - changed < LIVE_SECONDS else "stopped"

    def screenshot(self, row: dict[str, Any]) -> Path | None:
        """The grader's screenshot file when it is an image inside the run folder, else None."""
        value = (row.get("info") or {}).get("screenshot")
        if not isinstance(value, str) or not value or "\x00" in value:
            return None
        path = Path(value)
        path = (path if path.is_absolute() else self.run_dir / path).resolve()
        if not path.is_relative_to(self.run_dir) or path.suffix.lower() not in IMAGE_TYPES or not path.is_file():
            return None
        return path


def _number(request: Request, name: str, kind: type = float) -> Any:
    value = request.query_params.get(name, "").strip()
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"query parameter {name}={value!r} is not a {kind.__name__}") from None


def build_app(run: RunFolder, allowed_hosts: list[str] | None = None, refresh_seconds: float = 1.0) -> Starlette:
    """The Starlette app over `run`; a daemon thread keeps the index up to date while it serves."""

    async def overview(request: Request) -> Response:
        text, config = run.config()
        metrics = run.metrics()
        steps = [row["step"] for row in metrics if isinstance(row.get("step"), int)]
        total = (config.get("train") or {}).get("steps")
        last = max(steps, default=None)
        return JSONResponse({
            "run": run.run_dir.name, "path": str(run.run_dir), "config_text": text,
            "summary": {"env": (config.get("env") or {}).get("name"), "model": (config.get("model") or {}).get("name"),
                        "algo": (config.get("algo") or {}).get("name"), "total_steps": total, "last_step": last},
            "status": run.status(total if isinstance(total, int) else None, last),
            "trajectories": run.index.count(), "facets": run.index.facets()})

    async def metrics(request: Request) -> Response:
        return JSONResponse({"rows": run.metrics()})

    async def steps(request: Request) -> Response:
        return JSONResponse({"steps": run.index.steps()})

    async def groups(request: Request) -> Response:
        step = _number(request, "step", int)
        if step is None:
            return JSONResponse({"error": "query parameter step is required"}, status_code=400)
        return JSONResponse({"step": step, "groups": run.index.groups(step)})

    async def trajectories(request: Request) -> Response:
        q = request.query_params
        infra = {"1": True, "0": False}.get(q.get("infra", ""))
        page = run.index.query(
            family=q.get("family", ""), finish_reason=q.get("finish", ""), reward_min=_number(request, "reward_min"),
            reward_max=_number(request, "reward_max"), step_min=_number(request, "step_min", int),
            step_max=_number(request, "step_max", int), group_id=q.get("group", ""), infra=infra, text=q.get("q", ""),
            limit=min(_number(request, "limit", int) or 100, 500), offset=_number(request, "offset", int) or 0)
        return JSONResponse(page)

    async def trajectory(request: Request) -> Response:
        row = run.index.row(request.path_params["traj_id"])
        if row is None:
            return JSONResponse({"error": "no such trajectory"}, status_code=404)
        members = run.index.group_members(row["_index"]["step"], row["_index"]["group_id"])
        rewards = [m["reward"] for m in members if m["reward"] is not None]
        row["_group"] = {"members": [m["id"] for m in members], "mean_reward": sum(rewards) / len(rewards) if rewards else None}
        row["_screenshot"] = run.screenshot(row) is not None
        return JSONResponse(row)

    async def screenshot(request: Request) -> Response:
        row = run.index.row(request.path_params["traj_id"])
        path = run.screenshot(row) if row else None
        if path is None:
            return JSONResponse({"error": "no screenshot inside the run folder"}, status_code=404)
        return FileResponse(path, media_type=IMAGE_TYPES[path.suffix.lower()])

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    async def bad_request(request: Request, error: Exception) -> Response:  # a bad query parameter
        return JSONResponse({"error": str(error)}, status_code=400)

    async def headers(request: Request, call_next) -> Response:
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    def keep_indexing() -> None:
        while True:
            run.index.update()
            time.sleep(refresh_seconds)

    routes = [
        Route("/", page), Route("/api/overview", overview), Route("/api/metrics", metrics), Route("/api/steps", steps),
        Route("/api/groups", groups), Route("/api/trajectories", trajectories),
        Route("/api/trajectory/{traj_id:int}", trajectory), Route("/api/trajectory/{traj_id:int}/screenshot", screenshot),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]
    # Loopback only by default: the Host check also stops a web page from reaching the viewer by DNS rebinding.
    middleware = [Middleware(BaseHTTPMiddleware, dispatch=headers)]
    if allowed_hosts:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    app = Starlette(routes=routes, middleware=middleware, exception_handlers={ValueError: bad_request})
    threading.Thread(target=keep_indexing, name="rlyard-view-index", daemon=True).start()
    return app
