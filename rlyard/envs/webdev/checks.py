"""The deterministic part of the grade: DOM checks from the task's spec, measured in the page.

Each check is measured by one in-page function (`MEASURE_JS`, a probe per check and viewport,
run in an isolated world so the page's own scripts cannot redefine what it reads) and scored
here in [0, 1]; query fit is their weighted mean. Only what is painted counts (paint.py): an
element must have a box of at least 2 x 2 px, not be `visibility: hidden` or under ancestors'
opacity ~0, intersect the screenshotted page, be found by `elementFromPoint` at its sample
points, show something in its box on the screenshot, and, if it holds text, show a legible
run of it. So text hidden with `display: none`, the 1 px screen-reader trick, off-page offsets,
transparent fills, overlays or a zero font size does not meet a check. A check with nothing to
check (no images for `alt_text`, no text for `contrast`) scores 0: an empty page meets no check.

| kind | passes when | score |
| --- | --- | --- |
| `exists` | at least `min` (1) visible matches of `selector` | 0 / 1 |
| `count` | `min` <= visible matches <= `max` | 0 / 1 |
| `text` | the visible matches' text holds each string of `contains` (case aside) | share found |
| `row` | the first `count` visible matches sit side by side in one row | 0 / 1 |
| `stacked` | the first `count` visible matches sit one below the other | 0 / 1 |
| `no_hscroll` | the page is no wider than the viewport (and shows some text) | 0 / 1 |
| `alt_text` | visible images have alt text (`alt=""` only with role presentation) | share |
| `labels` | visible form controls have a label (for=, wrapping, aria-label(ledby)) | share |
| `contrast` | painted text reaches `min_ratio` (4.5; 3 for large text, WCAG 2) over the colour drawn behind it | share |
| `click` | `expect` has no visible match before a click on `selector`, and one after | 0 / 1 |
| `visual` | SSIM to the reference screenshot, rescaled (visual.py) | [0, 1] |

`viewport` is `desktop` (1440 px, the default) or `mobile` (390 px; `no_hscroll`'s default).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rlyard.envs.webdev.paint import legible, painted, run_background, shown_text

KINDS = ("exists", "count", "text", "row", "stacked", "no_hscroll", "alt_text", "labels", "contrast", "click", "visual")
VIEWPORTS = ("desktop", "mobile")
NEEDS_SELECTOR = ("exists", "count", "text", "row", "stacked", "click")
CONTROLS = ("input:not([type=hidden]):not([type=submit]):not([type=button]):not([type=reset]):not([type=image]), "
            "select, textarea")
DEFAULT_SELECTOR = {"alt_text": "img", "labels": CONTROLS, "contrast": "body *", "no_hscroll": "body", "visual": ""}


def normalize_checks(checks: Any, where: str) -> list[dict]:
    """The spec's checks with defaults filled; ValueError naming `where`, the check and the field."""
    if not isinstance(checks, list) or not checks:
        raise ValueError(f"{where}: checks must be a non-empty list")
    out = []
    for i, raw in enumerate(checks):
        name = f"{where}: checks[{i}]"
        if not isinstance(raw, dict) or raw.get("kind") not in KINDS:
            raise ValueError(f"{name}: kind must be one of {list(KINDS)}, got {raw!r}")
        check = {"weight": 1.0, "viewport": "mobile" if raw["kind"] == "no_hscroll" else "desktop",
                 "selector": DEFAULT_SELECTOR.get(raw["kind"], ""), **raw}
        if check["kind"] in NEEDS_SELECTOR and not check["selector"]:
            raise ValueError(f"{name}: kind {check['kind']} needs a selector")
        if check["viewport"] not in VIEWPORTS:
            raise ValueError(f"{name}: viewport must be one of {list(VIEWPORTS)}, got {check['viewport']!r}")
        if not isinstance(check["weight"], (int, float)) or check["weight"] <= 0:
            raise ValueError(f"{name}: weight must be a positive number, got {check['weight']!r}")
        if check["kind"] == "text":
            contains = check.get("contains")
            check["contains"] = [contains] if isinstance(contains, str) else contains
            if not check["contains"] or not all(isinstance(s, str) and s for s in check["contains"]):
                raise ValueError(f"{name}: text needs contains (a string or a list of strings)")
        if check["kind"] in ("row", "stacked") and not (isinstance(check.get("count"), int) and check["count"] >= 2):
            raise ValueError(f"{name}: {check['kind']} needs count >= 2")
        if check["kind"] == "click" and not check.get("expect"):
            raise ValueError(f"{name}: click needs expect (the selector that must show after the click)")
        out.append(check)
    return out


PAGE_TEXT = -1  # the id of the desktop probe that reads all the page's text (paint.legible_share)


def probes(checks: list[dict]) -> dict[str, list[dict]]:
    """What to measure at each viewport: one probe per check (clicks last: they change the page),
    and at the desktop the page's text for the hidden-text gate."""
    by_viewport: dict[str, list[dict]] = {v: [] for v in VIEWPORTS}
    by_viewport["desktop"].append({"id": PAGE_TEXT, "kind": "page_text", "selector": "body", "expect": ""})
    for i, check in enumerate(checks):
        if check["kind"] != "visual":
            by_viewport[check["viewport"]].append({"id": i, "kind": check["kind"], "selector": check["selector"],
                                                   "expect": check.get("expect", "")})
    for viewport in VIEWPORTS:
        by_viewport[viewport].sort(key=lambda p: p["kind"] == "click")
    return by_viewport


def luminance(rgb: tuple[float, float, float]) -> float:
    """WCAG 2 relative luminance of an sRGB colour with channels 0..255."""
    def linear(c: float) -> float:
        c /= 255.0
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(fg: tuple[float, float, float], bg: tuple[float, float, float]) -> float:
    high, low = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def blend(top: list[float], under: tuple[float, float, float]) -> tuple[float, float, float]:
    """`top` (r, g, b, alpha) painted over the opaque colour `under`."""
    alpha = top[3]
    return tuple(alpha * t + (1 - alpha) * u for t, u in zip(top[:3], under))


def text_contrast(item: list, under: tuple[float, float, float] | None = None) -> tuple[float, float]:
    """(ratio, the ratio required) for one text element: [fg rgba, [bg rgba from itself up], px, weight];
    `under` is the colour the screenshot shows behind it (else the CSS backgrounds over white)."""
    fg, layers, size, weight = item
    bg = (255.0, 255.0, 255.0)  # the canvas
    for layer in reversed(layers):
        bg = blend(layer, bg)
    if under is not None:
        bg = under
    large = size >= 24 or (size >= 18.66 and weight >= 700)
    return contrast_ratio(blend(fg, bg), bg), 3.0 if large else 4.5


def in_row(rects: list[list[float]]) -> bool:
    """Side by side: left edges increase without overlap, and every box overlaps the first vertically."""
    top, bottom = rects[0][1], rects[0][1] + rects[0][3]
    for (x0, _, w0, _), (x1, y1, _, h1) in zip(rects, rects[1:]):
        if x1 < x0 + w0 - 1 or y1 >= bottom or y1 + h1 <= top:
            return False
    return True


def stacked(rects: list[list[float]]) -> bool:
    return all(b[1] >= a[1] + a[3] - 1 for a, b in zip(rects, rects[1:]))


def score_check(check: dict, data: dict | None, image: np.ndarray | None = None) -> float:
    """One check's score in [0, 1] from its probe's measure (None: not measured -> 0), counting
    only the elements painted in `image` (the viewport's screenshot; None: not pixel-checked)."""
    if data is None or data.get("error"):
        return 0.0
    kind = check["kind"]
    records = data.get("els", [])
    shown = [r for r in records if painted(image, r)]
    n = len(shown)
    if kind == "exists":
        return float(n >= check.get("min", 1))
    if kind == "count":
        return float(check.get("min", 1) <= n + data.get("more", 0) <= check.get("max", 10**9))
    if kind == "text":
        text = " ".join(shown_text(image, shown).split()).casefold()
        return sum(" ".join(s.split()).casefold() in text for s in check["contains"]) / len(check["contains"])
    if kind in ("row", "stacked"):
        rects = [r["rect"] for r in shown][: check["count"]]
        return float(len(rects) == check["count"] and (in_row if kind == "row" else stacked)(rects))
    if kind == "no_hscroll":
        return float(bool(shown_text(image, shown).strip()) and data["scroll_width"] <= data["inner_width"] + 1)
    if kind == "alt_text":
        ok = [good for r, good in zip(records, data["ok"]) if painted(image, r)]
        return sum(ok) / len(ok) if ok else 0.0
    if kind == "labels":  # an aria name, or a label that is itself painted
        ok = [good or any(painted(image, label) for label in labels)
              for r, good, labels in zip(records, data["ok"], data["labels"]) if painted(image, r)]
        return sum(ok) / len(ok) if ok else 0.0
    if kind == "contrast":
        ratios = []
        for record, (fg, layers, size, weight) in zip(records, data["items"]):
            runs = [run for run in record["runs"] if legible(image, run)] if painted(image, record) else []
            if runs:
                under = run_background(image, runs[0])
                ratios.append(text_contrast([fg, layers, size, weight], under))
        needed = check.get("min_ratio")
        return sum(r >= (needed or req) - 1e-9 for r, req in ratios) / len(ratios) if ratios else 0.0
    if kind == "click":  # the control clicked must be painted (the revealed part has no screenshot)
        return float(bool(data.get("shown")) and painted(image, data["target"]))
    raise ValueError(f"unknown check kind {kind!r}")


def query_fit(checks: list[dict], measures: dict[str, list], visual: float | None,
              images: dict[str, np.ndarray] | None = None) -> tuple[float, list[float]]:
    """(fit, each check's score): the weighted mean; `visual` is the rescaled SSIM (None: no reference, 0);
    `images` the screenshot of each viewport (paint.rgb_image) that elements must be painted in."""
    found = {m["id"]: m for viewport in measures.values() for m in viewport}
    images = images or {}
    scores = [(visual or 0.0) if c["kind"] == "visual" else score_check(c, found.get(i), images.get(c["viewport"]))
              for i, c in enumerate(checks)]
    total = sum(c["weight"] for c in checks)
    return sum(c["weight"] * s for c, s in zip(checks, scores)) / total, scores


MEASURE_JS = r"""
(probes) => {
  const MAXH = 6000;
  const docH = Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0);
  const pageW = innerWidth, pageH = Math.min(docH, MAXH);
  const force = document.createElement('style');
  force.textContent = '*, *::before, *::after { pointer-events: auto !important; }';
  document.documentElement.appendChild(force);
  const opac = new Map();
  const opacity = (el) => { if (!el || el.nodeType !== 1) return 1; if (opac.has(el)) return opac.get(el);
    const o = parseFloat(getComputedStyle(el).opacity) * opacity(el.parentElement); opac.set(el, o); return o; };
  const docRect = (r) => [r.left + scrollX, r.top + scrollY, r.width, r.height];
  const inPage = (b) => b[2] > 0 && b[3] > 0 && b[0] < pageW && b[1] < pageH && b[0] + b[2] > 0 && b[1] + b[3] > 0;
  const clip = (b) => { const x0 = Math.max(0, b[0]), y0 = Math.max(0, b[1]);
    return [x0, y0, Math.min(pageW, b[0] + b[2]) - x0, Math.min(pageH, b[1] + b[3]) - y0]; };
  // does elementFromPoint at (x, y) of the page find `el` (or inside it)? null: the point is off the page
  const hitOk = (el, x, y) => {
    if (x < 0 || y < 0 || x >= pageW || y >= pageH) return null;
    if (y < scrollY || y >= scrollY + innerHeight || scrollX) scrollTo({ left: 0, top: Math.max(0, y - innerHeight / 2), behavior: 'instant' });
    const h = document.elementFromPoint(x - scrollX, y - scrollY);
    if (scrollY || scrollX) scrollTo({ left: 0, top: 0, behavior: 'instant' });
    return !!h && (h === el || el.contains(h));
  };
  const cssVisible = (el) => {
    const r = el.getBoundingClientRect();
    if (r.width < 2 || r.height < 2) return false;
    const s = getComputedStyle(el);
    if (s.visibility !== 'visible' || opacity(el) < 0.05) return false;
    return inPage(docRect(r));
  };
  const all = (sel) => { try { return [...document.querySelectorAll(sel)].filter(cssVisible); } catch (e) { return null; } };
  const range = document.createRange();
  const runsOf = (el, limit, ownOnly, keepEmpty) => {
    const out = [], nodes = ownOnly ? [...el.childNodes].filter((n) => n.nodeType === 3) : null;
    const walker = ownOnly ? null : document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let i = 0, n = ownOnly ? nodes[0] : walker.nextNode(); n && out.length < limit; n = ownOnly ? nodes[++i] : walker.nextNode()) {
      const text = n.textContent;
      if (!text.trim()) continue;
      const p = n.parentElement;
      if (!p) continue;
      const s = getComputedStyle(p);
      if (s.visibility !== 'visible' || opacity(p) < 0.05 || !p.getClientRects().length) continue;
      range.selectNodeContents(n);
      const rs = [...range.getClientRects()].map(docRect).filter(inPage).map(clip).filter((r) => r[2] >= 1 && r[3] >= 1);
      if (!rs.length) { if (keepEmpty) out.push([[], 0, false, text.replace(/\s+/g, ' ').slice(0, 500)]); continue; }
      const size = Math.min(parseFloat(s.fontSize), Math.max(...rs.map((r) => r[3])));
      const hit = rs.slice(0, 3).some((r) => hitOk(p, r[0] + r[2] / 2, r[1] + r[3] / 2));
      out.push([rs.slice(0, 4), size, hit, text.replace(/\s+/g, ' ').slice(0, 500)]);
    }
    return out;
  };
  const record = (el, runLimit, ownOnly) => {
    const b = docRect(el.getBoundingClientRect());
    const parts = [...el.getClientRects()].map(docRect);
    const pts = parts.length > 1 ? parts.slice(0, 5).map((r) => [r[0] + r[2] / 2, r[1] + r[3] / 2])
      : [[0.5, 0.5], [0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]].map(([fx, fy]) => [b[0] + b[2] * fx, b[1] + b[3] * fy]);
    const res = pts.map(([x, y]) => hitOk(el, x, y)).filter((v) => v !== null);
    const hit = res.length > 0 && res.filter(Boolean).length * 2 >= res.length;
    // a select's options are drawn by the control itself, not as text boxes of the page
    const textful = el.tagName === 'SELECT' ? false : ownOnly ? [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())
      : !!(el.innerText || '').trim();
    return { rect: b, box: clip(b), hit, textful, runs: textful ? runsOf(el, runLimit, ownOnly) : [] };
  };
  const rgba = (c) => { const m = (c || '').match(/rgba?\(([^)]+)\)/); if (!m) return [0, 0, 0, 0];
    const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const labelled = (el) => {
    if ((el.getAttribute('aria-label') || '').trim()) return true;
    const by = el.getAttribute('aria-labelledby');
    return !!(by && by.split(/\s+/).some((id) => { const t = document.getElementById(id); return t && t.textContent.trim(); }));
  };
  const ownText = (el) => [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  const records = (els, runLimit) => els.slice(0, 300).map((e) => record(e, runLimit, false));
  const measure = (p) => {
    const els = all(p.selector);
    if (els === null) return { id: p.id, error: 'bad selector' };
    const base = { id: p.id, n: els.length, more: Math.max(0, els.length - 300) };
    switch (p.kind) {
      case 'text': return { ...base, els: records(els.slice(0, 50), 200) };
      case 'row': case 'stacked': return { ...base, els: records(els.slice(0, 24), 8) };
      case 'no_hscroll': return { ...base, scroll_width: document.documentElement.scrollWidth, inner_width: innerWidth,
        els: document.body ? [record(document.body, 100, false)] : [] };
      case 'alt_text': return { ...base, els: records(els, 4), ok: els.slice(0, 300).map((e) => { const a = e.getAttribute('alt'); return a !== null && (a.trim() !== '' || e.getAttribute('role') === 'presentation'); }) };
      case 'labels': return { ...base, els: records(els, 4), ok: els.slice(0, 300).map(labelled),
        labels: els.slice(0, 300).map((e) => [...(e.labels || [])].filter(cssVisible).slice(0, 2).map((l) => record(l, 4, false))) };
      case 'page_text': return { ...base, runs: document.body ? runsOf(document.body, 600, false, true) : [] };
      case 'contrast': { const own = els.filter(ownText).slice(0, 300);
        return { ...base, els: own.map((e) => record(e, 4, true)), items: own.map((e) => {
          const s = getComputedStyle(e), layers = [];
          for (let a = e; a && a.nodeType === 1; a = a.parentElement) { const b = rgba(getComputedStyle(a).backgroundColor); if (b[3] > 0) layers.push(b); if (b[3] >= 1) break; }
          return [rgba(s.webkitTextFillColor || s.color), layers, parseFloat(s.fontSize), parseInt(s.fontWeight) || 400]; }) }; }
      case 'click': {
        if (!els.length) return { ...base, shown: false };
        const stop = (ev) => ev.preventDefault();
        addEventListener('submit', stop); addEventListener('click', (ev) => { if (ev.target.closest && ev.target.closest('a[href]')) ev.preventDefault(); });
        const target = record(els[0], 4, false);
        const before = all(p.expect);
        els[0].click();
        const after = all(p.expect);
        return { ...base, target, shown: !!(before && after && !before.length && after.length) };
      }
      default: return { ...base, els: records(els, 8) };
    }
  };
  const out = [];
  for (const p of probes) {
    if (p.kind === 'click' && force.isConnected) force.remove();
    try { out.push(measure(p)); } catch (e) { out.push({ id: p.id, error: String(e) }); }
  }
  if (force.isConnected) force.remove();
  scrollTo({ left: 0, top: 0, behavior: 'instant' });
  return JSON.stringify({ probes: out, height: docH });
}
"""
HEIGHT_JS = r"""() => String(Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0))"""
