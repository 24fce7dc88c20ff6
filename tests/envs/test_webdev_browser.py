"""The grader's browser is boxed like a sandbox: nothing a page sends reaches the host, a page
that eats memory is stopped at the limit, and Chromium does not run as root.

Listeners are the test's own, on 127.0.0.1 port 0 (UDP and TCP). One page tries every way out
from JavaScript for three seconds: WebRTC (STUN and TURN over UDP and TCP, by address and by
name), WebSocket, fetch, sendBeacon, an image, a dns-prefetch and lookups of names that
resolve to loopback (`localhost`, `*.localhost`). The control renders the same page in a
Chromium launched as before this change (root, `--no-sandbox`, the host's network namespace,
the same flags), and its WebRTC datagrams do arrive: the listeners can hear what the box stops.
"""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rlyard.envs.webdev.checks import normalize_checks
from rlyard.envs.webdev.render import ARGS, WORKERS, browser_available, chromium_path, renderer
from rlyard.envs.webdev.verify import grade_dist

pytestmark = [pytest.mark.timeout(300)]
needs_browser = pytest.mark.skipif(not browser_available(), reason="needs Debian chromium and nodejs")

WAIT_JS = """() => new Promise((done) => setTimeout(() => done(JSON.stringify({probes: [], height: 100})), 3000))"""
EXITS = """<!doctype html><html><body><h1>out</h1><link rel="dns-prefetch" href="//probe-dns.localhost">
<script>
const U = {udp}, T = {tcp};
const tryit = (f) => {{ try {{ f(); }} catch (e) {{}} }};
for (const host of ["127.0.0.1", "localhost", "probe.localhost"]) {{
  tryit(() => {{
    const pc = new RTCPeerConnection({{ iceServers: [
      {{ urls: [`stun:${{host}}:${{U}}`] }},
      {{ urls: [`turn:${{host}}:${{U}}?transport=udp`, `turn:${{host}}:${{T}}?transport=tcp`], username: "u", credential: "p" }}],
      iceTransportPolicy: "all" }});
    pc.createDataChannel("x");
    pc.createOffer().then((o) => pc.setLocalDescription(o)).catch(() => {{}});
  }});
  tryit(() => new WebSocket(`ws://${{host}}:${{T}}/ws`));
  tryit(() => fetch(`http://${{host}}:${{T}}/fetch`, {{ mode: "no-cors" }}).catch(() => {{}}));
  tryit(() => navigator.sendBeacon(`http://${{host}}:${{T}}/beacon`, "bits"));
  tryit(() => {{ const i = new Image(); i.src = `http://${{host}}:${{T}}/img.png`; }});
}}
</script></body></html>"""
HOG = """<!doctype html><html><body><h1>Hello</h1><script>
const keep = [];
for (let i = 0; i < 16; i++) { const a = new Uint8Array(256 << 20); a.fill(i + 1); keep.push(a); }  // 4 GiB, touched
document.title = String(keep.length);
</script></body></html>"""
OK_PAGE = "<!doctype html><html><body><h1>Hello</h1><p>fine</p></body></html>"


class Listeners:
    """A UDP and a TCP listener on 127.0.0.1 port 0, counting what arrives."""

    def __init__(self):
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(64)
        self.datagrams, self.connections = 0, 0
        self._stop = False
        for target in (self._udp, self._tcp):
            threading.Thread(target=target, daemon=True).start()

    @property
    def ports(self) -> tuple[int, int]:
        return self.udp.getsockname()[1], self.tcp.getsockname()[1]

    def _udp(self):
        self.udp.settimeout(0.2)
        while not self._stop:
            try:
                self.udp.recvfrom(65536)
                self.datagrams += 1
            except OSError:
                continue

    def _tcp(self):
        self.tcp.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.tcp.accept()
                self.connections += 1
                conn.close()
            except OSError:
                continue

    def close(self):
        self._stop = True
        time.sleep(0.3)
        self.udp.close()
        self.tcp.close()


@pytest.fixture(scope="module")
def browser():
    yield WORKERS
    WORKERS.close()


def site(root: Path, html: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "index.html").write_text(html)
    return root


def payload(tmp: Path, timeout_s: float = 20.0) -> dict:
    return {"checks": normalize_checks([{"kind": "text", "selector": "h1", "contains": "Hello"}], "test"),
            "reference": None, "timeout_s": timeout_s, "screenshot_dir": str(tmp / "shots"), "statement": "test"}


def control_render(dist: Path) -> None:
    """The same page in a Chromium launched the old way: root, --no-sandbox, the host's network."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", *ARGS])
        try:
            page = browser.new_page()
            page.route("**/*", lambda route, request: route.fulfill(body=(dist / "index.html").read_text(), content_type="text/html")
                       if request.url.startswith("http://site.local/") else route.abort("blockedbyclient"))
            page.goto("http://site.local/index.html")
            page.evaluate(WAIT_JS)
        finally:
            browser.close()


@needs_browser
def test_nothing_a_page_sends_arrives(browser, tmp_path):
    listeners = Listeners()
    try:
        dist = site(tmp_path / "exits", EXITS.format(udp=listeners.ports[0], tcp=listeners.ports[1]))
        out = WORKERS.run(lambda: renderer(20.0).render(dist, {"desktop": [], "mobile": []}, WAIT_JS))
        assert not (out.hung or out.broken or out.over_limit), out
        time.sleep(0.5)
        assert (listeners.datagrams, listeners.connections) == (0, 0)
        isolation = WORKERS.run(lambda: renderer().box.isolation)
        assert isolation["netns"] and isolation["uid"] != 0, isolation
        control_render(dist)  # before this change: the same page, the old launch
        time.sleep(0.5)
        print(f"control (old launch): {listeners.datagrams} datagrams, {listeners.connections} connections")
        assert listeners.datagrams > 0, "the control browser's WebRTC should reach the host's loopback"
    finally:
        listeners.close()


@needs_browser
def test_chromium_runs_unprivileged_in_its_own_namespace(browser, tmp_path):
    reward = grade_dist(site(tmp_path / "ok", OK_PAGE), payload(tmp_path), "ok")
    assert reward.value == 1.0, reward
    pids = WORKERS.run(lambda: renderer().box.pids_in())
    assert len(pids) >= 3  # browser, zygotes, renderer ...
    ps = subprocess.run(["ps", "-o", "uid=,comm=", "-p", ",".join(map(str, pids))], capture_output=True, text=True).stdout
    rows = [line.split(None, 1) for line in ps.splitlines() if line.strip()]
    assert rows and any("chrom" in comm for _, comm in rows), ps
    if os.geteuid() == 0:
        assert all(int(uid) != 0 for uid, _ in rows), ps
    ours = os.readlink("/proc/self/ns/net")
    assert all(os.readlink(f"/proc/{pid}/ns/net") != ours for pid in pids if Path(f"/proc/{pid}").exists())


@needs_browser
def test_a_page_allocating_4_gib_is_stopped_at_the_limit(browser, tmp_path):
    before = WORKERS.run(lambda: renderer().launches)
    started = time.perf_counter()
    reward = grade_dist(site(tmp_path / "hog", HOG), payload(tmp_path), "hog")
    assert not reward.infra_error, reward.info
    assert reward.value == 0.0 and reward.components["over_limit"] == 1.0, reward
    assert "memory limit" in reward.info["reason"]
    assert time.perf_counter() - started < 60
    healthy = grade_dist(site(tmp_path / "ok", OK_PAGE), payload(tmp_path), "ok")
    assert healthy.value == 1.0, healthy  # the worker was replaced: a fresh browser graded it
    assert WORKERS.run(lambda: renderer().launches) > before


LIAR = """<!doctype html><html><body><h1>Hello</h1><script>
Document.prototype.querySelectorAll = function () { return []; };
Element.prototype.getBoundingClientRect = function () { return { left: -9999, top: -9999, right: -9998, bottom: -9998, width: 1, height: 1 }; };
document.elementFromPoint = () => null;
window.getComputedStyle = () => ({ opacity: '0', visibility: 'hidden' });
</script></body></html>"""


@needs_browser
def test_the_measure_ignores_what_the_page_redefines(browser, tmp_path):
    # the measure runs in an isolated world: the page's own JavaScript cannot change what it reads
    reward = grade_dist(site(tmp_path / "liar", LIAR), payload(tmp_path), "liar")
    assert reward.value == 1.0 and reward.info["checks"][0]["score"] == 1.0, reward


@needs_browser
def test_a_page_past_the_time_limit_scores_0_and_its_worker_is_replaced(browser, tmp_path):
    before = WORKERS.run(lambda: renderer().launches)
    spin = "<!doctype html><html><body><h1>Hello</h1><script>setTimeout(() => { for (;;) {} }, 300)</script></body></html>"
    reward = grade_dist(site(tmp_path / "spin", spin), payload(tmp_path, timeout_s=2.0), "spin")
    assert reward.value == 0.0 and reward.components["hung"] == 1.0, reward
    healthy = grade_dist(site(tmp_path / "ok", OK_PAGE), payload(tmp_path), "ok")
    assert healthy.value == 1.0, healthy
    assert WORKERS.run(lambda: renderer().launches) > before
