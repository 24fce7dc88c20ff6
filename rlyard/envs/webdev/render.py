"""The browser: Debian's Chromium driven by Playwright, one per grader thread, a fresh context per page.

The policy's `dist/` is served to the browser alone, under http://site.local/, by a route on
the context: nothing listens on a port, and each file is resolved (links followed) and must
stay inside `dist/` (a link to the grader's reference page is a 404). Every other request is
aborted and counted. The browser itself runs in a box (browser.py): a pool uid, a network
namespace with no way out, a memory and pid cgroup; so what a route does not see (WebRTC, a
socket) cannot leave either.

Playwright's sync objects belong to the thread that made them, so each browser lives in a worker
thread of its own (`BrowserWorkers`, workers.py: RLYARD_WEBDEV_BROWSERS per process, default 2)
and is reused across pages: starting Chromium costs more than grading a page
(bench/webdev_render.py). At each viewport the full-page screenshot is taken first, then the
measure runs in an isolated world (the page's DOM, pristine built-ins). A page that does not
settle in time (a loop in a script), or passes the box's memory or process limit, loses its
browser: the worker's next page gets a fresh one.

The time limit is kept at three levels, because a page whose script never yields can leave a
Playwright call waiting for good, and with it the grader's thread, while its renderer spins on a
core: some calls have no timeout (`context.close()`, `browser.close()`, a CDP call), and
`page.screenshot` has been seen to outlive its own: a page looping from 300-360 ms after `load`
kept it waiting in about one render of 30, when the loop began during the capture.
- each Playwright call that has a timeout gets the page's `timeout_s` (then: hung);
- a watchdog per viewport kills the browser's processes (BrowserBox.kill) at `visit_limit_s`:
  every call waiting on them then fails, the page is hung and the next page gets a new browser;
- `render_site`'s caller waits at most `render_limit_s` after a worker takes the page: then the
  browser is killed from the caller's side and, if the worker still does not come back, it is
  replaced (workers.py) and the page scores as hung.
A dropped browser is always killed before `browser.close()` (see `Renderer.restart`).
"""
from __future__ import annotations

import json
import mimetypes
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlsplit

from rlyard.envs.webdev.browser import BrowserBox, kill_child, sandbox_failed, sandbox_usable
from rlyard.envs.webdev.checks import HEIGHT_JS
from rlyard.envs.webdev.workers import BrowserWorkers, WorkerStuck

HOST = "site.local"
ORIGIN = f"http://{HOST}"
DESKTOP = {"width": 1440, "height": 900}
MOBILE = {"width": 390, "height": 844}
MAX_FILE_BYTES = 5 << 20  # a bigger file in dist/ is served as 404
MAX_SHOT_HEIGHT = 6000  # px of a full-page screenshot kept (an endless page is cut)
SETTLE_MS = 150  # after `load`: late layout, web fonts, a first timer
LAUNCH_TIMEOUT_S = 30.0  # Playwright's own limit on starting Chromium (then: infra error)
VISIT_SLACK_S = 5.0  # see visit_limit_s
ARGS = [
    "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
    "--font-render-hinting=none", "--force-color-profile=srgb", "--disable-extensions", "--no-first-run",
    "--disable-background-networking", "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
]


class RendererUnavailable(RuntimeError):
    """Chromium or Playwright is missing, or the browser will not start: the grader's fault (infra)."""


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise RendererUnavailable("webdev needs Chromium: install the Debian package `chromium` (scripts/setup.sh); "
                                  "`playwright install` is not used")
    return path


def browser_available() -> bool:
    """Chromium and nodejs are installed (the renderer and the gate's `node --check`)."""
    try:
        chromium_path()
    except RendererUnavailable:
        return False
    return shutil.which("node") is not None


@dataclass
class Rendered:
    """What one page did in the browser, at each viewport."""

    measures: dict[str, list] = field(default_factory=dict)  # viewport name -> one result per probe (checks.py)
    screenshot: bytes | None = None  # full-page PNG at the desktop viewport
    shots: dict[str, bytes] = field(default_factory=dict)  # viewport name -> its full-page PNG (before any click)
    page_errors: list[str] = field(default_factory=list)  # uncaught exceptions (pageerror)
    blocked: list[str] = field(default_factory=list)  # requests aborted: anything not under http://site.local/
    missing: list[str] = field(default_factory=list)  # site paths answered 404 (absent, outside dist/, too big)
    hung: str = ""  # the viewport whose load or measure timed out ("" if none)
    over_limit: str = ""  # the browser box's memory or process limit was passed (browser.py): why
    broken: str = ""  # the page navigated away or crashed while measured ("" if none)


def site_file(root: Path, url_path: str) -> Path | None:
    """The file of dist/ a URL path names, or None: absent, a folder without index.html, too big,
    or (after every link is followed) outside dist/."""
    relative = unquote(url_path).lstrip("/")
    if relative == "" or relative.endswith("/"):
        relative += "index.html"
    try:
        top = root.resolve()
        path = (top / relative).resolve()
    except (OSError, RuntimeError):
        return None
    if path.is_dir():
        path = path / "index.html"
    if top not in path.parents or not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
        return None
    return path


def visit_limit_s(timeout_s: float) -> float:
    """How long one viewport (context, load, screenshot, measure, close) may take before its
    browser is killed: each step has `timeout_s` of its own, so a page that uses most of it in
    two steps is not cut; one that needs more is hung anyway."""
    return 2 * timeout_s + VISIT_SLACK_S


def render_limit_s(timeout_s: float) -> float:
    """How long `render_site`'s caller waits for a worker that has started its page: two
    launches and two viewports at their limits, and the closing after each (restart)."""
    return 2 * (LAUNCH_TIMEOUT_S + visit_limit_s(timeout_s)) + 2 * VISIT_SLACK_S


class Renderer:
    """One Chromium for this thread; `render` loads a dist/ folder at both viewports."""

    def __init__(self, timeout_s: float = 10.0):
        self.timeout_s = timeout_s
        self._playwright = self._browser = None
        self.box: BrowserBox | None = None
        self.launches = 0
        self.viewport = ""  # the viewport being rendered ("" between pages): read by render_site
        self._driver_pid: int | None = None  # Playwright's node driver (a child of this process)
        self._hang_killed = False  # a watchdog killed the browser during this page: hung
        self._abandoned = False  # its worker was given up (abandon): no more Playwright calls

    def browser(self):
        if self._browser is None or not self._browser.is_connected():
            self.restart()
            executable = chromium_path()
            try:
                from playwright.sync_api import sync_playwright
            except ImportError as error:
                raise RendererUnavailable(f"webdev needs the Python package playwright ({error})") from error
            try:
                if self._playwright is None:
                    self._playwright = sync_playwright().start()
                self._browser = self._launch(executable)
            except Exception as error:
                self.close()
                raise RendererUnavailable(f"Chromium ({executable}) did not start: {error}") from error
            self.launches += 1
            self.box.launched()
            self._driver_pid = self.box.driver_pid or self._driver_pid
        return self._browser

    def _launch(self, executable: str):
        """Chromium in a fresh box, with its own sandbox on unless that already failed here once."""
        for own_sandbox in ((True, False) if sandbox_usable() else (False,)):
            self.box = BrowserBox(executable)
            try:
                return self._playwright.chromium.launch(executable_path=self.box.executable, args=ARGS,
                                                        chromium_sandbox=own_sandbox, timeout=LAUNCH_TIMEOUT_S * 1000)
            except Exception as error:
                self.box.close()
                self.box = None
                if not own_sandbox:
                    raise
                sandbox_failed(str(error))
        raise AssertionError("unreachable")

    def restart(self) -> None:
        """Drop this browser (a hung, crashed or over-limit one) and its box; the next page starts a fresh one.

        Its processes are killed first: `browser.close()` has no timeout and waits until every
        process holding Chromium's stdout has exited (browser.py); once they are dead, it only
        tidies up (Playwright's temporary profile)."""
        browser, self._browser = self._browser, None
        box, self.box = self.box, None
        if box is not None:
            box.kill()
        if browser is not None and not self._abandoned:
            try:
                browser.close()
            except Exception:
                pass
        if box is not None:
            box.close()

    def close(self) -> None:
        self.restart()
        if self._playwright is not None and not self._abandoned:
            try:
                self._playwright.stop()
            except Exception:
                pass
        self._playwright = None

    def abandon(self, give_up: bool) -> None:
        """Called from another thread when this renderer's page runs past `render_limit_s`:
        kill the browser's processes, so that the Playwright call the worker waits in fails
        (the page: hung). `give_up` (the worker did not come back even so): also kill the
        Playwright driver, and make no more Playwright calls from this renderer."""
        self._hang_killed = True
        box = self.box
        if box is not None:
            box.kill()
        if give_up:
            self._abandoned = True
            kill_child(self._driver_pid)

    def _watchdog(self, box: BrowserBox | None) -> threading.Timer:
        """Started for a viewport: at `visit_limit_s` it kills the box (then: hung)."""
        def kill() -> None:
            self._hang_killed = True
            if box is not None:
                box.kill()

        timer = threading.Timer(visit_limit_s(self.timeout_s), kill)
        timer.daemon = True
        timer.start()
        return timer

    def render(self, dist: Path, probes: dict[str, list[dict]], measure_js: str,
               stop: Callable[[Rendered], bool] | None = None) -> Rendered:
        """Load dist/index.html at the desktop and the mobile viewport (when it has probes), run
        `measure_js(probes)` in each, take the desktop full-page screenshot."""
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        out = Rendered()
        for name, viewport in (("desktop", DESKTOP), ("mobile", MOBILE)):
            if name == "mobile" and (not probes.get("mobile") or (stop is not None and stop(out))):
                continue
            self.viewport = name
            self._hang_killed = False  # (a kill in an earlier viewport was followed by a restart)
            context = box = watchdog = None
            try:
                browser = self.browser()
                box = self.box
                watchdog = self._watchdog(box)
                context = browser.new_context(viewport=viewport, reduced_motion="reduce", service_workers="block",
                                              accept_downloads=False, java_script_enabled=True)
                self._visit(context, dist, viewport, name, probes.get(name, []), measure_js, out)
            except PlaywrightTimeout:
                out.hung = out.hung or name
            except PlaywrightError as error:
                out.over_limit = box.reason or box.over_limit() if box is not None else ""
                if not out.over_limit and self._hang_killed:
                    out.hung = out.hung or name
                elif not out.over_limit and (not self._browser or not self._browser.is_connected()):
                    self.restart()
                    raise RendererUnavailable(f"Chromium died while rendering: {error}") from error
                else:
                    out.broken = "" if out.over_limit else f"{name}: {str(error).splitlines()[0][:300]}"
            finally:
                out.over_limit = out.over_limit or (box.reason or box.over_limit() if box is not None else "")
                # a spinning page can block context.close() for good: the watchdog kills the browser then
                if context is not None and not out.over_limit and not out.hung:
                    try:
                        context.close()
                    except Exception:
                        self.restart()
                if watchdog is not None:
                    watchdog.cancel()
            if out.hung or out.over_limit or self._hang_killed:
                self.restart()  # a page that spun or passed a limit: its worker gets a fresh browser
            if out.hung or out.broken or out.over_limit:
                break
        self.viewport = ""
        return out

    def _visit(self, context, dist: Path, viewport: dict, name: str, probes: list[dict], measure_js: str, out: Rendered) -> None:
        timeout_ms = self.timeout_s * 1000

        def serve(route, request) -> None:
            url = urlsplit(request.url)
            if url.scheme != "http" or url.hostname != HOST or url.port is not None:
                out.blocked.append(request.url[:300])
                route.abort("blockedbyclient")
                return
            path = site_file(dist, url.path)
            if path is None:
                out.missing.append(url.path[:300])
                route.fulfill(status=404, body="not found", content_type="text/plain")
                return
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            route.fulfill(status=200, body=path.read_bytes(), content_type=kind)

        context.route("**/*", serve)
        context.on("page", lambda page: page.on("dialog", lambda dialog: dialog.dismiss()))
        page = context.new_page()
        page.on("pageerror", lambda error: out.page_errors.append(str(error)[:500]))
        page.on("websocket", lambda socket: out.blocked.append(socket.url[:300]))
        page.goto(f"{ORIGIN}/index.html", wait_until="load", timeout=timeout_ms)
        page.wait_for_timeout(SETTLE_MS)
        # The measure runs in an isolated world (the page's DOM, pristine JavaScript built-ins), so a
        # page that redefines getBoundingClientRect or elementFromPoint cannot lie to it. The screenshot comes first: the measure's element boxes are read in the same layout, before
        # any click probe changes the page
        page.wait_for_function("() => true", timeout=timeout_ms)  # the page's thread is free (else: hung)
        world = self._isolated_world(context, page)
        height = max(1, min(int(world(HEIGHT_JS, None)), MAX_SHOT_HEIGHT))
        out.shots[name] = page.screenshot(full_page=True, animations="disabled", timeout=timeout_ms,
                                          clip={"x": 0, "y": 0, "width": viewport["width"], "height": height})
        if name == "desktop":
            out.screenshot = out.shots[name]
        measured = json.loads(world(measure_js, probes))
        out.measures[name] = measured["probes"]

    def _isolated_world(self, context, page):
        """`run(js, arg) -> str` evaluating `(js)(arg)` in a world of its own over the page's DOM; a
        page whose thread spins past the time limit gets its browser killed (then: hung)."""
        from playwright.sync_api import Error as PlaywrightError

        def guarded(method: str, params: dict) -> dict:
            """A CDP call has no timeout of its own: past the limit the box is killed (then: hung)."""
            box = self.box

            def kill() -> None:
                self._hang_killed = True
                if box is not None:
                    box.kill()

            timer = threading.Timer(self.timeout_s, kill)
            timer.daemon = True
            timer.start()
            try:
                return cdp.send(method, params)
            finally:
                timer.cancel()

        cdp = context.new_cdp_session(page)
        frame = guarded("Page.getFrameTree", {})["frameTree"]["frame"]["id"]
        world = guarded("Page.createIsolatedWorld", {"frameId": frame, "worldName": "rlyard-measure"})["executionContextId"]

        def run(js: str, arg) -> str:
            done = guarded("Runtime.evaluate", {"expression": f"({js})({json.dumps(arg)})", "contextId": world,
                                                "returnByValue": True, "awaitPromise": True,
                                                "timeout": int(self.timeout_s * 1000)})
            if "exceptionDetails" in done or not isinstance(done.get("result", {}).get("value"), str):
                raise PlaywrightError(f"the measure failed: {str(done.get('exceptionDetails', done))[:300]}")
            return done["result"]["value"]
        return run


_local = threading.local()


def renderer(timeout_s: float = 10.0) -> Renderer:
    """This thread's renderer (made on first use; its browser starts with the first page)."""
    current = getattr(_local, "renderer", None)
    if current is None:
        current = _local.renderer = Renderer(timeout_s)
    current.timeout_s = timeout_s
    return current


def _close_local() -> None:
    """Close the calling worker thread's browser and driver, if it made one."""
    current = getattr(_local, "renderer", None)
    if current is not None:
        current.close()


WORKERS = BrowserWorkers(int(os.environ.get("RLYARD_WEBDEV_BROWSERS", "2")), close_browser=_close_local)


def render_site(dist: Path, probes: dict[str, list[dict]], measure_js: str, timeout_s: float,
                stop: Callable[[Rendered], bool] | None = None) -> Rendered:
    """Render on one of the browser workers (RLYARD_WEBDEV_BROWSERS of them per process, default 2).

    Returns within `render_limit_s(timeout_s)` (plus workers.STUCK_GRACE_S) of a worker taking
    the page, whatever the page does: past that, the page is hung (module docstring)."""
    used: list[Renderer] = []

    def job() -> Rendered:
        current = renderer(timeout_s)
        used.append(current)
        return current.render(dist, probes, measure_js, stop)

    def on_stuck(give_up: bool) -> None:
        if used:
            used[0].abandon(give_up)

    try:
        return WORKERS.run(job, limit_s=render_limit_s(timeout_s), on_stuck=on_stuck)
    except WorkerStuck:
        return Rendered(hung=(used[0].viewport if used else "") or "desktop")
