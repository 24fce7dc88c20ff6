"""Pages that show nothing score nothing: each hiding class, the reference page of four built-in
tasks changed by one CSS rule, scores at most 0.1 (before the pixel checks: 0.67-0.998, off the
left and top 0 already; see docs/webdev.md). A test per class renders it on two of the four
tasks at once on the browser workers, the pair turning with the class, so that every task meets
six to eight classes (docs/webdev.md's table is all four); four classes are also played through the
episode's own tools (write_file, submit).
"""
from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from rlyard.envs.checks import play_replies
from rlyard.envs import get_family
from rlyard.envs.webdev.render import WORKERS, browser_available
from rlyard.envs.webdev.tasks import make_tasks
from rlyard.envs.webdev.verify import grade_dist
from rlyard.sandbox import bwrap_works

pytestmark = [pytest.mark.timeout(600)]
needs_browser = pytest.mark.skipif(not browser_available(), reason="needs Debian chromium and nodejs")

TASKS = ("landing_page", "pricing_table", "dashboard_cards", "login_form")
# one CSS rule each; BG is the task's body background
CLASSES = {
    "transparent text fill": "* { -webkit-text-fill-color: transparent !important; }",
    "root opacity": "html { opacity: 0.06 !important; }",
    "root filter": "html { filter: opacity(0) !important; }",
    "blurred root": "html { filter: blur(40px) !important; }",
    "clip-path": "html { clip-path: inset(0 0 100% 0) !important; }",
    "white overlay": "body::after { content: ''; position: fixed; inset: 0; background: #fff; z-index: 2147483647; }",
    "off the right": "body { position: relative !important; left: 3000px !important; }",
    "off the bottom": "body { position: relative !important; top: 7000px !important; }",
    "off the left": "body { position: relative !important; left: -3000px !important; }",
    "off the top": "body { position: relative !important; top: -7000px !important; }",
    "same colour": "*, *::before, *::after { color: BG !important; background-color: BG !important; }",
    "font-size 0": "* { font-size: 0 !important; }",
    "scaled to 1%": "html { transform: scale(0.01) !important; }",  # ours: computed sizes stay whole
    "text indented away": "* { text-indent: -100000px !important; }",  # ours: boxes stay, their text leaves
}


def variant(task, rule: str) -> str:
    reference = Path(task.payload["site"])
    background = re.search(r"body \{[^}]*background: (#[0-9a-f]+)", (reference / "style.css").read_text()).group(1)
    html = (reference / "index.html").read_text()
    return html.replace("</head>", f"<style>{rule.replace('BG', background)}</style></head>")


@pytest.fixture(scope="module")
def tasks():
    yield {t.id: t for t in make_tasks("eval", 100, 0, eval_percent=100) if t.id in TASKS}
    WORKERS.close()


def pair_for(name: str) -> tuple[str, str]:
    """The class's two tasks: consecutive in TASKS, moving on by one from class to class."""
    i = list(CLASSES).index(name)
    return TASKS[i % len(TASKS)], TASKS[(i + 1) % len(TASKS)]


def grade_on_every_task(tasks: dict, rule: str | None, root: Path) -> dict:
    """{task: reward} of the rule's variant (None: the reference) on the given tasks, two at a time."""
    jobs = {}
    for task_id, task in tasks.items():
        folder = Path(task.payload["site"])
        if rule is not None:
            folder = root / task_id
            shutil.copytree(task.payload["site"], folder)
            (folder / "index.html").write_text(variant(task, rule))
        jobs[task_id] = (folder, {**task.payload, "screenshot_dir": str(root / "shots")})
    with ThreadPoolExecutor(2) as pool:
        futures = {t: pool.submit(grade_dist, folder, payload, t) for t, (folder, payload) in jobs.items()}
        return {t: future.result() for t, future in futures.items()}


@needs_browser
def test_the_references_still_score(tasks, tmp_path):
    for task_id, reward in grade_on_every_task(tasks, None, tmp_path).items():
        assert reward.value >= 0.99, (task_id, reward.info.get("checks"))


@needs_browser
@pytest.mark.parametrize("name", list(CLASSES))
def test_a_hiding_class_scores_at_most_a_tenth(tasks, tmp_path, name):
    pair = {t: tasks[t] for t in pair_for(name)}
    for task_id, reward in grade_on_every_task(pair, CLASSES[name], tmp_path).items():
        assert not reward.infra_error, reward.info
        assert reward.value <= 0.1, (name, task_id, reward.value, reward.info.get("reason"), reward.info.get("checks"))


def call(name: str, **arguments) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@needs_browser
@pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")
@pytest.mark.parametrize("name", ["transparent text fill", "white overlay", "off the right", "font-size 0"])
def test_hiding_through_the_tools_scores_zero(tasks, tmp_path, name):
    task = tasks["pricing_table"]
    task = replace(task, payload={**task.payload, "screenshot_dir": str(tmp_path / "shots")})
    css = (Path(task.payload["site"]) / "style.css").read_text()
    replies = [call("write_file", path="dist/index.html", content=variant(task, CLASSES[name]))
               + call("write_file", path="dist/style.css", content=css), call("submit", answer="done")]
    reward = play_replies(get_family("webdev").make_env(), task, replies)
    assert not reward.infra_error, reward.info
    assert reward.value <= 0.1 and reward.components["submitted"] == 1.0, (name, reward.components, reward.info.get("reason"))
