"""The webdev family against real Chromium, node and a real judge server; hostile pages score 0.

The grader's browser workers serve the whole module (one browser each); the gate tests check
that after each failure (a syntax error, a thrown error, an endless loop, an outside request, a
missing index) the next ordinary page is still graded normally. Numbers are computed by hand in
the comments: DOM-check fits, WCAG ratios, SSIM of flat images, the judge's picks and rewards.
"""
from __future__ import annotations

import base64
import io
import json
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rlyard.envs.checks import play_replies
from rlyard.envs import get_family
from rlyard.envs.webdev.checks import contrast_ratio, normalize_checks
from rlyard.envs.webdev.render import WORKERS, browser_available
from rlyard.envs.webdev.tasks import BUILTIN, load_spec, make_tasks
from rlyard.envs.webdev.validate import check_task
from rlyard.envs.webdev.verify import deduction, grade_dist, screenshot_dir
from rlyard.envs.webdev.visual import gray, load_reference, reduce, ssim, visual_score
from rlyard.sandbox import bwrap_works
from rlyard.types import Trajectory

pytestmark = [pytest.mark.timeout(300)]
needs_browser = pytest.mark.skipif(not browser_available(), reason="needs Debian chromium and nodejs")

OK_PAGE = "<!doctype html><html><body><h1>Hello</h1><p>fine</p></body></html>"
OK_CHECKS = [{"kind": "text", "selector": "h1", "contains": "Hello"}]


@pytest.fixture(scope="module")
def browser():
    yield WORKERS
    WORKERS.close()


def site(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def payload(checks: list[dict], tmp: Path, timeout_s: float = 3.0, reference: str | None = None) -> dict:
    return {"checks": normalize_checks(checks, "test"), "reference": reference, "timeout_s": timeout_s,
            "screenshot_dir": str(tmp / "shots"), "statement": "test"}


def landing_task():
    return next(t for t in make_tasks("eval", 100, 0, eval_percent=100) if t.id == "landing_page")


def test_builtin_set_loads_and_splits():
    tasks = make_tasks("train", 100, 0) + make_tasks("eval", 100, 0)
    assert len({t.id for t in tasks}) == len(tasks) >= 24
    assert 0 < len(make_tasks("eval", 100, 0)) < len(tasks)
    bad = BUILTIN.parent / "nowhere"
    with pytest.raises(ValueError, match="kind must be one of"):
        normalize_checks([{"kind": "sparkle"}], "x.yaml")
    with pytest.raises(ValueError, match="no task.yaml"):
        load_spec(bad)
    assert deduction(0.95) == 0.0 and deduction(0.6) == 0.2 and deduction(0.45) == 0.4 and deduction(0.2) == 0.8
    assert deduction(0.19) is None


def test_screenshots_go_to_the_run_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("RLYARD_RUN_DIR", str(tmp_path / "run"))
    assert screenshot_dir(None) == tmp_path / "run" / "screenshots"
    assert screenshot_dir(str(tmp_path / "mine")) == tmp_path / "mine"  # the option wins
    monkeypatch.delenv("RLYARD_RUN_DIR")
    assert screenshot_dir(None).name == "rlyard-webdev-screenshots"


@needs_browser
def test_gate_failures_score_zero_and_the_grader_stays_healthy(browser, tmp_path):
    pages = {
        "syntax_error": {"index.html": "<html><body><h1>Hello</h1><script>function ( {</script></body></html>"},
        "syntax_error_file": {"index.html": '<html><body><h1>Hello</h1><script src="app.js"></script></body></html>',
                              "app.js": "let x = ;\n"},
        "page_error": {"index.html": "<html><body><h1>Hello</h1><script>throw new Error('boom')</script></body></html>"},
        "hung": {"index.html": "<html><body><h1>Hello</h1><script>while (true) {}</script></body></html>"},
        "hung_later": {"index.html": "<html><body><h1>Hello</h1><script>setTimeout(() => { for (;;) {} }, 10)</script></body></html>"},
        "blocked_request": {"index.html": '<html><body><h1>Hello</h1><img alt="x" src="http://example.com/a.png"></body></html>'},
        "missing_index": {"home.html": OK_PAGE},
    }
    for name, files in pages.items():
        started = time.perf_counter()
        reward = grade_dist(site(tmp_path / name, files), payload(OK_CHECKS, tmp_path, timeout_s=2.0), name)
        key = name.replace("_file", "").replace("_later", "")
        assert not reward.infra_error, reward.info
        assert reward.value == 0.0 and reward.components[key] == 1.0 and reward.components["gate"] == 0.0, (name, reward)
        assert reward.info["reason"]
        assert time.perf_counter() - started < 15
        healthy = grade_dist(site(tmp_path / f"{name}-next", {"index.html": OK_PAGE}), payload(OK_CHECKS, tmp_path), "ok")
        assert healthy.value == 1.0 and healthy.info["blocked_requests"] == 0, (name, healthy)
    blocked = grade_dist(tmp_path / "blocked_request", payload(OK_CHECKS, tmp_path), "b")
    assert blocked.info["blocked_requests"] == 1 and blocked.info["blocked"] == ["http://example.com/a.png"]
    assert "SyntaxError" in grade_dist(tmp_path / "syntax_error_file", payload(OK_CHECKS, tmp_path), "s").info["reason"]


HAND_PAGE = """<!doctype html><html><head><style>
body { margin: 0; font-family: sans-serif; } .row { display: flex; } .card { flex: none; width: 300px; height: 100px; }
</style></head><body>
<h1>Hello</h1>
<div class="row"><div class="card">a</div><div class="card">b</div><div class="card">c</div></div>
<img src="i.svg" alt="a circle" width="20" height="20"><img src="i.svg" width="20" height="20">
<label for="x">Name</label><input id="x"><input id="y">
<p style="display: none">Missing</p>
</body></html>"""
SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20"><circle cx="10" cy="10" r="9"/></svg>'


@needs_browser
def test_dom_checks_match_hand_computed_fit(browser, tmp_path):
    checks = [
        {"kind": "exists", "selector": "h1"},  # 1, weight 1
        {"kind": "count", "selector": ".card", "min": 3, "max": 3, "weight": 2},  # 1
        {"kind": "row", "selector": ".card", "count": 3},  # 1: three 300 px cards side by side at 1440 px
        {"kind": "stacked", "selector": ".card", "count": 3, "viewport": "mobile"},  # 0: the row does not wrap
        {"kind": "alt_text", "weight": 2},  # 1 of 2 images -> 0.5
        {"kind": "labels"},  # 1 of 2 inputs -> 0.5
        {"kind": "text", "selector": "body", "contains": ["Hello", "Missing"]},  # "Missing" is display:none -> 0.5
        {"kind": "no_hscroll"},  # 0: 900 px of cards at 390 px
    ]
    reward = grade_dist(site(tmp_path / "hand", {"index.html": HAND_PAGE, "i.svg": SVG}), payload(checks, tmp_path), "hand")
    scores = [c["score"] for c in reward.info["checks"]]
    assert scores == [1.0, 1.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.0]
    # (1 + 2 + 1 + 0 + 2 * 0.5 + 0.5 + 0.5 + 0) / 10 = 0.6 -> deduction band 0.2; reward = fit
    assert reward.components["fit"] == pytest.approx(0.6) and reward.value == pytest.approx(0.6)
    assert reward.components["deduction"] == 0.2
    assert Path(reward.info["screenshot"]).is_file() and Path(reward.info["screenshot"]).parent == tmp_path / "shots"


@needs_browser
def test_contrast_by_the_wcag_formula(browser, tmp_path):
    # #777 on white: L = ((119/255 + 0.055) / 1.055) ** 2.4 = 0.1845; (1.05) / (0.1845 + 0.05) = 4.48 < 4.5
    assert contrast_ratio((119, 119, 119), (255, 255, 255)) == pytest.approx(4.478, abs=1e-3)
    assert contrast_ratio((0, 0, 0), (255, 255, 255)) == pytest.approx(21.0)
    page = """<html><body style="margin:0">
<p style="color:#000">A</p><p style="color:#777">B</p><p style="color:#fff;background:#000">C</p>
<p style="color:rgba(0,0,0,0.5)">D</p><h1 style="color:#777;font-size:32px">E</h1></body></html>"""
    # A 21 pass; B 4.48 fail; C 21 pass; D 50% black over white = 127.5 grey, 3.98 fail; E large text needs 3: pass -> 3/5
    reward = grade_dist(site(tmp_path / "contrast", {"index.html": page}), payload([{"kind": "contrast"}], tmp_path), "c")
    assert reward.components["fit"] == pytest.approx(0.6)


@needs_browser
def test_ssim_identical_blank_and_flat_grey(browser, tmp_path):
    task = landing_task()
    reference = load_reference(Path(task.payload["reference"]))
    shot = grade_dist(Path(task.payload["site"]), task.payload, task.id)
    png = Path(shot.info["screenshot"]).read_bytes()
    score, raw = visual_score(png, reference)
    assert raw == pytest.approx(1.0, abs=1e-9) and score == pytest.approx(1.0, abs=1e-9)
    blank = grade_dist(site(tmp_path / "blank", {"index.html": "<html><body><p>.</p></body></html>"}), task.payload, "blank")
    # one dot: the blank-screenshot gate stops it; its visual score against the best flat page is ~0
    assert blank.value == 0.0 and blank.components["blank_page"] == 1.0, blank
    assert visual_score(Path(blank.info["screenshot"]).read_bytes(), reference)[0] < 0.05
    # flat images: sigma = 0, so SSIM is the luminance term (2 mx my + C1) / (mx^2 + my^2 + C1), C1 = (0.01 * 1)^2
    shots = {}
    for name, colour in (("white", "#ffffff"), ("grey", "#808080")):
        r = grade_dist(site(tmp_path / name, {"index.html": f"<html><body style='background:{colour}'><p style='color:{colour}'>x</p></body></html>"}),
                       payload(OK_CHECKS, tmp_path), name)
        shots[name] = reduce(gray(Path(r.info["screenshot"]).read_bytes()))
    mx, my, c1 = 128 / 255, 1.0, 1e-4
    assert ssim(shots["grey"], shots["white"]) == pytest.approx((2 * mx * my + c1) / (mx ** 2 + my ** 2 + c1), abs=1e-6)
    assert ssim(shots["white"], shots["white"]) == 1.0
    assert ssim(np.ones((5, 3)), np.ones((20, 20))) == 1.0  # cut / padded with white to the reference's shape


@needs_browser
@pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")
def test_validate_a_task(browser):
    tasks = [t for t in make_tasks("eval", 100, 0, eval_percent=100) if t.id == "tabs_component"]
    assert len(tasks) == 1
    for task in tasks:
        check = check_task(task)
        assert check.ok, check.error
        assert check.base_reward == 0.0 and check.fixed_reward >= 0.9


def play(task, replies: list[str]):
    return play_replies(get_family("webdev").make_env(), task, replies)


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@needs_browser
@pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")
def test_attacks_through_the_tools_score_zero(browser, tmp_path):
    task = landing_task()
    task = replace(task, payload={**task.payload, "screenshot_dir": str(tmp_path / "shots")})
    reference = Path(task.payload["site"])
    html, css = (reference / "index.html").read_text(), (reference / "style.css").read_text()
    honest = play(task, [call("write_file", path="dist/index.html", content=html) + call("write_file", path="dist/style.css", content=css),
                         call("submit", answer="done")])
    assert honest.value == pytest.approx(1.0) and honest.components["submitted"] == 1.0
    hidden = html.replace("<body>", '<body><p>hi</p><div style="display:none">').replace("</body>", "</div></body>")
    attacks = {
        "required text in display:none": [call("write_file", path="dist/index.html", content=hidden)],
        "dist/index.html linked to the reference": [call("bash", command=f"ln -s {reference}/index.html dist/index.html")],
        "dist/ linked to the reference folder": [call("bash", command=f"rmdir dist && ln -s {reference} dist")],
        "the reference fetched over file://": [call("write_file", path="dist/index.html", content=(
            f'<html><body><iframe src="file://{reference}/index.html"></iframe><script>fetch("file://{reference}/index.html")'
            '.then((r) => r.text()).then((t) => { document.body.innerHTML = t; }).catch(() => {});</script></body></html>'))],
        "a meta refresh to an outside site": [call("write_file", path="dist/index.html", content=html.replace(
            "<head>", '<head><meta http-equiv="refresh" content="0; url=http://example.com/">'))],
        "nothing written": [call("submit", answer="done")],
    }
    for name, replies in attacks.items():
        reward = play(task, replies)
        assert not reward.infra_error, (name, reward.info)
        assert reward.value == 0.0, (name, reward.components, reward.info.get("reason"))
    refresh = play(task, attacks["a meta refresh to an outside site"])
    assert refresh.components["blocked_request"] == 1.0 and refresh.info["blocked_requests"] >= 1


# ---- the group judge, over a real HTTP server and the real client ----

def judge_app():
    """Chat completions whose verdict is scripted by the URL's first segment: "dark" names the darkest
    screenshot better and the brightest worse; "tie" finds no difference; "bad" names a screenshot
    that does not exist; "garbage" answers prose."""
    from PIL import Image
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def complete(request):
        mode, body = request.path_params["mode"], await request.json()
        images = [part["image_url"]["url"].split(",", 1)[1] for part in body["messages"][-1]["content"] if part["type"] == "image_url"]
        means = [np.asarray(Image.open(io.BytesIO(base64.b64decode(b))).convert("L"), dtype=float).mean() for b in images]
        verdict = {"dark": {"better": [int(np.argmin(means)) + 1], "worse": [int(np.argmax(means)) + 1]},
                   "tie": {"better": [], "worse": []}, "bad": {"better": [len(images) + 3], "worse": []}}.get(mode)
        text = json.dumps(verdict) if verdict else "They all look lovely."
        return JSONResponse({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                             "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]})
    return Starlette(routes=[Route("/{mode}/v1/chat/completions", complete, methods=["POST"])])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def judge_server():
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(judge_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def member(tmp: Path, name: str, grey: int | None, deduction_value: float | None, gate: float = 1.0, infra: bool = False) -> Trajectory:
    from PIL import Image

    info, components = {}, {"gate": gate}
    if grey is not None:
        path = tmp / f"{name}.png"
        Image.new("RGB", (144, 90), (grey, grey, grey)).save(path)
        info["screenshot"] = str(path)
    elif gate == 1.0:
        info["screenshot"] = str(tmp / "gone.png")
    if deduction_value is not None:
        components["deduction"] = deduction_value
    return Trajectory(task_id="t", group_id="g", token_ids=[1], loss_mask=[1], behaviour_logprobs=[0.0], policy_versions=[0],
                      reward=0.5, components=components, infra_error=infra, info=info)


def group_task(base_url: str, tmp: Path, **extra):
    task = landing_task()
    cache = tmp / "cache" / base_url.replace("/", "_").replace(":", "_")  # a verdict cached for one script is not another's
    judge = {"base_url": base_url, "model": "vision", "retries": 1, "cache_dir": str(cache), **extra}
    return replace(task, payload={**task.payload, "judge": judge})


def test_judge_picks_and_rewards(judge_server, tmp_path):
    family = get_family("webdev")
    group = [member(tmp_path, "dark", 20, 0.0), member(tmp_path, "mid", 120, 0.2), member(tmp_path, "bright", 230, 0.4),
             member(tmp_path, "gated", 0, None, gate=0.0), member(tmp_path, "infra", 50, 0.0, infra=True),
             member(tmp_path, "unreadable", None, 0.0)]
    group[3] = replace(group[3], reward=0.0)
    out = family.score_group(group_task(f"{judge_server}/dark/v1", tmp_path), group)
    # 3 candidates, 3 rounds: dark named better every round (+3 / 3 = 1), bright worse (-1), mid never (0)
    assert [t.components.get("pick") for t in out[:3]] == [1.0, 0.0, -1.0]
    # (pick - deduction + 2) / 3: (1 - 0 + 2) / 3 = 1; (0 - 0.2 + 2) / 3 = 0.6; (-1 - 0.4 + 2) / 3 = 0.2
    assert [t.reward for t in out[:3]] == pytest.approx([1.0, 0.6, 0.2])
    assert out[3].reward == 0.0 and out[4] == group[4]  # gated keeps 0; infra left as it was
    assert out[5].reward == pytest.approx((1.0 + 0.6 + 0.2 + 0.0) / 4)  # the group mean of the scored members

    ties = family.score_group(group_task(f"{judge_server}/tie/v1", tmp_path), group[:3])
    assert [t.reward for t in ties] == pytest.approx([2 / 3, 1.8 / 3, 1.6 / 3])  # pick 0: (2 - deduction) / 3
    assert "no clear difference" in ties[0].info["judge"]["why_zero"]
    invalid = family.score_group(group_task(f"{judge_server}/bad/v1", tmp_path), group[:3])
    assert [t.components["pick"] for t in invalid] == [0.0, 0.0, 0.0] and not any(t.infra_error for t in invalid)


def test_unavailable_judge_makes_infra_never_zero(judge_server, tmp_path):
    family = get_family("webdev")
    group = [member(tmp_path, "a", 20, 0.0), member(tmp_path, "b", 200, 0.2), replace(member(tmp_path, "g", 0, None, gate=0.0), reward=0.0)]
    for url in (f"http://127.0.0.1:{free_port()}/v1", f"{judge_server}/garbage/v1"):
        out = family.score_group(group_task(url, tmp_path, backoff_s=0.0), group)
        assert [t.infra_error for t in out] == [True, True, False], url
        assert "judge unavailable" in out[0].info["error"] and out[2].reward == 0.0
