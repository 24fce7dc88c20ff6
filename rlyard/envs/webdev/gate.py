"""The runtime gate: what makes a page score 0 whatever its looks.

Before the browser: `dist/index.html` must exist (inside dist/, links followed), and every
script must parse under `node --check`: inline `<script>` blocks and the .js files of dist/.
A script passes if it parses as a classic script or as a module (node decides which by the
extension), since a page may load it either way; the browser's own parse errors of a script
loaded the other way surface as page errors. In the browser (render.py): an uncaught page
error, a request outside the site, a page that does not settle in time, a page that passes
the browser's memory or process limit (browser.py), a page that navigates away or crashes
while measured.
"""
from __future__ import annotations

import itertools
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from rlyard.envs.webdev.render import Rendered, site_file

NODE_TIMEOUT_S = 10.0
MAX_SCRIPTS = 64  # more sources than this are not all checked (the browser still sees them)
MAX_FILES = 5000  # files of dist/ looked at for scripts
NOT_JS = ("application/json", "application/ld+json", "importmap", "text/template", "text/html", "text/x-template",
          "speculationrules")


class NodeUnavailable(RuntimeError):
    """node is missing: the grader's fault (infra)."""


class Scripts(HTMLParser):
    """The inline script blocks of one HTML file, with whether each is a module."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.blocks: list[tuple[str, bool]] = []
        self._open: tuple[bool, list[str]] | None = None

    def handle_starttag(self, tag, attrs):
        if tag != "script":
            return
        attributes = {k: (v or "") for k, v in attrs}
        kind = attributes.get("type", "").strip().lower()
        if "src" in attributes or kind in NOT_JS or (kind and "javascript" not in kind and kind != "module"):
            return
        self._open = (kind == "module", [])

    def handle_data(self, data):
        if self._open is not None:
            self._open[1].append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._open is not None:
            self.blocks.append(("".join(self._open[1]), self._open[0]))
            self._open = None


def node_path() -> str:
    path = shutil.which("node") or shutil.which("nodejs")
    if not path:
        raise NodeUnavailable("webdev's syntax gate needs node: install the Debian package `nodejs` (scripts/setup.sh)")
    return path


def parses(source: str, module: bool | None, folder: Path, index: int) -> str:
    """"" when `source` parses (module None: as a classic script or as a module), else node's message."""
    errors = []
    for as_module in ((False, True) if module is None else (module,)):
        path = folder / f"s{index}{'.mjs' if as_module else '.cjs'}"
        path.write_text(source, errors="replace")
        try:
            done = subprocess.run([node_path(), "--check", str(path)], capture_output=True, text=True,
                                  timeout=NODE_TIMEOUT_S, errors="replace")
        except subprocess.TimeoutExpired:
            return "node --check timed out"
        if done.returncode == 0:
            return ""
        lines = [line for line in done.stderr.splitlines() if "SyntaxError" in line] or done.stderr.splitlines()[-1:]
        errors.append(lines[0].strip() if lines else f"exit {done.returncode}")
    return errors[0]


def syntax_errors(dist: Path) -> list[str]:
    """'file: message' for each script of dist/ that does not parse."""
    sources: list[tuple[str, str, bool | None]] = []
    for path in sorted(itertools.islice(dist.rglob("*"), MAX_FILES)):
        served = site_file(dist, str(path.relative_to(dist)))
        if served is None:
            continue
        name = str(path.relative_to(dist))
        if path.suffix.lower() in (".html", ".htm"):
            parser = Scripts()
            try:
                parser.feed(served.read_text(errors="replace"))
            except Exception:
                continue  # what html.parser cannot read, the browser still judges
            sources += [(f"{name} (inline script {k + 1})", text, module) for k, (text, module) in enumerate(parser.blocks)]
        elif path.suffix.lower() in (".js", ".mjs"):
            sources.append((name, served.read_text(errors="replace"), True if path.suffix.lower() == ".mjs" else None))
    errors = []
    with tempfile.TemporaryDirectory(prefix="rlyard-webdev-js-") as folder:
        for k, (name, text, module) in enumerate(sources[:MAX_SCRIPTS]):
            if text.strip():
                message = parses(text, module, Path(folder), k)
                if message:
                    errors.append(f"{name}: {message}")
    return errors


def missing_index(dist: Path) -> bool:
    """No dist/index.html to serve; dist/ itself a link (to the reference site, say) counts as none."""
    return dist.is_symlink() or not dist.is_dir() or site_file(dist, "/index.html") is None


def runtime_failure(rendered: Rendered) -> tuple[str, str]:
    """(component name, reason) of the first runtime failure of a rendered page; ("", "") if none."""
    if rendered.over_limit:
        return "over_limit", rendered.over_limit
    if rendered.hung:
        return "hung", f"the page did not settle within the time limit ({rendered.hung})"
    if rendered.broken:
        return "broken", rendered.broken
    if rendered.page_errors:
        return "page_error", rendered.page_errors[0]
    if rendered.blocked:
        return "blocked_request", f"{len(rendered.blocked)} request(s) outside the site, e.g. {rendered.blocked[0]}"
    return "", ""
