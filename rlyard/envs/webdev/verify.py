"""Grade a dist/ folder: the runtime gate, then query fit from the spec's checks.

Reward without a judge: fit itself, and 0 below fit 0.2 (the recipe's last band). The bands'
deduction (fit >= 0.9 -> 0, >= 0.6 -> 0.2, >= 0.4 -> 0.4, >= 0.2 -> 0.8) is kept as a
component for the group judge (judge.py), which alone uses it: alone, the five bands would
give GRPO five reward levels where fit gives one per check met. A page the gate stops scores
0 with the reason as a component (`missing_index`, `syntax_error`, `page_error`,
`blocked_request`, `hung`, `over_limit`, `broken`) and in info["reason"].

A grader that cannot run (no Chromium, no node, a browser that died) returns infra_error.
"""
from __future__ import annotations

import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

from rlyard.envs.webdev.checks import MEASURE_JS, PAGE_TEXT, probes, query_fit
from rlyard.envs.webdev.gate import NodeUnavailable, missing_index, runtime_failure, syntax_errors
from rlyard.envs.webdev.render import Rendered, RendererUnavailable, render_site
from rlyard.envs.webdev.paint import MIN_LEGIBLE_SHARE, legible_share, rgb_image
from rlyard.envs.webdev.references import reference_image
from rlyard.envs.webdev.visual import MIN_DRAWN_SHARE, drawn_share, visual_cap, visual_score
from rlyard.types import Reward

BANDS = ((0.9, 0.0), (0.6, 0.2), (0.4, 0.4), (0.2, 0.8))  # (fit at least, deduction); below the last: reward 0


def deduction(fit: float) -> float | None:
    """The recipe's query deduction for a fit; None below 0.2 (the page scores 0 whatever else)."""
    for least, value in BANDS:
        if fit >= least - 1e-9:
            return value
    return None


def screenshot_dir(configured: str | None) -> Path:
    """Where screenshots go: the task's option (WebdevEnv.score fills it from the run folder in
    task.metadata["run_dir"]), else $RLYARD_RUN_DIR/screenshots (a run's subprocesses), else a
    folder under the system's temp directory."""
    if configured:
        return Path(configured)
    run_dir = os.environ.get("RLYARD_RUN_DIR")
    if run_dir:
        return Path(run_dir) / "screenshots"
    return Path(tempfile.gettempdir()) / "rlyard-webdev-screenshots"


def save_screenshot(png: bytes, folder: Path, task_id: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', task_id)[:80]}-{uuid.uuid4().hex[:10]}.png"
    path.write_bytes(png)
    return str(path.resolve())


def gated(reason_key: str, reason: str, info: dict[str, Any]) -> Reward:
    return Reward(0.0, {"gate": 0.0, reason_key: 1.0, "fit": 0.0}, {**info, "reason": reason})


def visual_gate(rendered: Rendered) -> tuple[str, str, dict[str, float]]:
    """(component, reason, measures) of the desktop screenshot's gate: near-uniform (`blank_page`),
    or under half of the page's text legible (`hidden_text`); ("", "", measures) when it passes.
    Also asked between viewports, so a page it stops is not rendered at the phone's width."""
    if rendered.screenshot is None:
        return "", "", {}
    share = drawn_share(rendered.screenshot)
    measured = {"drawn_share": round(share, 5)}
    if share < MIN_DRAWN_SHARE:
        return "blank_page", (f"the screenshot shows almost nothing ({share:.2%} of it differs from its dominant shade, "
                              f"under {MIN_DRAWN_SHARE:.2%})"), measured
    page_text = next((m for m in rendered.measures.get("desktop", []) if m.get("id") == PAGE_TEXT), None)
    if page_text is not None and "runs" in page_text:
        legible = legible_share(rgb_image(rendered.screenshot), page_text["runs"])
        measured["legible_text_share"] = round(legible, 4)
        if legible < MIN_LEGIBLE_SHARE:
            return "hidden_text", (f"only {legible:.0%} of the page's text is legible in the screenshot (under "
                                   f"{MIN_LEGIBLE_SHARE:.0%}): the rest is transparent, the colour of its background, "
                                   "too small, covered or off the page"), measured
    return "", "", measured


def grade_dist(dist: Path, payload: dict[str, Any], task_id: str) -> Reward:
    """The reward of the site in `dist` for the task whose payload is `payload`."""
    try:
        return _grade(Path(dist), payload, task_id)
    except (RendererUnavailable, NodeUnavailable) as error:
        return Reward(0.0, {}, {"error": str(error)}, infra_error=True)


def _grade(dist: Path, payload: dict[str, Any], task_id: str) -> Reward:
    info: dict[str, Any] = {"blocked_requests": 0}
    if missing_index(dist):
        return gated("missing_index", "dist/index.html is missing (or not a file inside dist/)", info)
    errors = syntax_errors(dist)
    if errors:
        return gated("syntax_error", errors[0], {**info, "syntax_errors": errors[:10]})
    checks = payload["checks"]
    verdict: list[tuple[str, str, dict[str, float]]] = []

    def stop(desktop: Rendered) -> bool:  # the desktop already fails the visual gate: skip the phone
        verdict.append(visual_gate(desktop))
        return bool(verdict[-1][0])

    rendered = render_site(dist, probes(checks), MEASURE_JS, float(payload["timeout_s"]), stop=stop)
    info.update(blocked_requests=len(rendered.blocked), blocked=rendered.blocked[:10], missing=rendered.missing[:10],
                page_errors=rendered.page_errors[:10])
    if rendered.screenshot is not None:
        info["screenshot"] = save_screenshot(rendered.screenshot, screenshot_dir(payload.get("screenshot_dir")), task_id)
    key, reason = runtime_failure(rendered)
    if key:
        return gated(key, reason, info)
    key, reason, measured = verdict[0] if verdict else visual_gate(rendered)
    info.update(measured)
    if key:
        return gated(key, reason, info)
    visual = raw = None
    reference = reference_image(payload) if rendered.screenshot is not None else None
    if reference is not None:
        visual, raw = visual_score(rendered.screenshot, reference)
    images = {name: rgb_image(png) for name, png in rendered.shots.items()}
    fit, scores = query_fit(checks, rendered.measures, visual, images)
    cap = visual_cap(visual)
    if fit > cap:
        info["visual_cap"] = round(cap, 4)
        fit = cap
    cut = deduction(fit)
    info["checks"] = [{"kind": c["kind"], "label": c.get("label", c["selector"]), "weight": c["weight"], "score": round(s, 4)}
                      for c, s in zip(checks, scores)]
    components = {"gate": 1.0, "fit": fit, "deduction": 1.0 if cut is None else cut}
    if visual is not None:
        components.update(visual=visual, ssim=raw)
    return Reward(fit if cut is not None else 0.0, components, info)
