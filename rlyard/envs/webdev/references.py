"""A task's reference screenshot, made from its reference site the first time it is needed.

Built-in tasks ship `reference.png` (scripts/webdev/make_references.py); generated tasks
(generate.py) have thousands of references, so each is rendered by the grader's own browser
the first time a page of that task is graded, reduced as make_references.py reduces it, and
stored atomically next to the site in the rlyard cache (masked inside the sandbox). The rule is
one for every task: a stored reference is used as it is; a missing one is made from the site.
"""
from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from rlyard.envs.webdev.checks import MEASURE_JS
from rlyard.envs.webdev.gate import runtime_failure
from rlyard.envs.webdev.render import RendererUnavailable, render_site
from rlyard.envs.webdev.visual import load_reference, reference_png

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock(path: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(str(path), threading.Lock())


def make_reference(site: Path, path: Path, timeout_s: float) -> None:
    """Render `site` at the desktop width and store its reduced screenshot at `path` (once per
    process at a time; another process racing writes the same bytes, renamed into place)."""
    with _lock(path):
        if path.is_file():
            return
        rendered = render_site(site, {"desktop": []}, MEASURE_JS, timeout_s)
        key, reason = runtime_failure(rendered)
        if key or rendered.screenshot is None:
            raise RendererUnavailable(f"the reference site {site} did not render ({reason or 'no screenshot'})")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as handle:
            handle.write(reference_png(rendered.screenshot))
        os.replace(tmp, path)


def reference_image(payload: dict[str, Any]) -> np.ndarray | None:
    """The task's reduced reference screenshot (None: the task has none), made if missing."""
    if not payload.get("reference"):
        return None
    path = Path(payload["reference"])
    site = Path(payload["site"]) if payload.get("site") else None
    if not path.is_file() and site is not None and (site / "index.html").is_file():
        make_reference(site, path, float(payload["timeout_s"]))
    return load_reference(path)
