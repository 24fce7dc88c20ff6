"""What the screenshot shows: an element counts for a DOM check only where it is painted.

The DOM says what a page claims (an element with the right text and box, a CSS colour that
contrasts); the screenshot says what a visitor sees. So a measured element (checks.MEASURE_JS)
counts only when all of these hold:

- its box intersects the page as screenshotted (1440 px wide, cut at 6,000 px), and
  `elementFromPoint` at sample points of its box (the page scrolled to each, pointer-events
  forced on) finds it or a descendant at half of them or more: nothing is drawn over it;
- the screenshot inside its box (2 px around it) is not one flat colour: something is drawn;
- if it holds text, at least one of its text runs is legible: rendered at least `MIN_TEXT_PX`
  tall (font-size, capped by the line box's height, so scale transforms count), hit-tested, and
  its pixels reach `MIN_INK_CONTRAST` (WCAG ratio, 98th percentile of the run's box) against
  the background drawn around the run (the mode of a 2 px ring outside it).

Transparent text fill, text the colour of what is behind it, blurred or zero-size text,
overlays (hit-testable or not), clipping and pages moved off the screenshot all fail one of these.
And the page as a whole: if less than MIN_LEGIBLE_SHARE of its rendered text (by characters;
display:none is not rendered) is legible, the page is hiding its text and scores 0 (verify.py).
"""
from __future__ import annotations

import io

import numpy as np

MIN_LEGIBLE_SHARE = 0.5
MIN_TEXT_PX = 8.0  # rendered text smaller than this is not text a visitor reads
MIN_INK_CONTRAST = 1.5  # WCAG ratio of a run's ink against its background: below, nothing legible is drawn
RING_PX = 2
FLAT_DELTA = 12  # a pixel this far (max channel, 0..255) from the box's dominant colour is drawn content
MIN_DRAWN_PIXELS = 4
MAX_SAMPLES = 40_000


def rgb_image(png: bytes) -> np.ndarray:
    """A screenshot as an H x W x 3 uint8 array (transparency over white)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png))
    image.load()
    if image.mode != "RGB":
        white = Image.new("RGB", image.size, (255, 255, 255))
        white.paste(image.convert("RGBA"), mask=image.convert("RGBA").split()[3])
        image = white
    return np.asarray(image, dtype=np.uint8)


def _crop(image: np.ndarray, box: list[float], pad: int = 0) -> np.ndarray:
    x, y, w, h = box
    x0, y0 = max(0, int(x) - pad), max(0, int(y) - pad)
    x1, y1 = min(image.shape[1], int(np.ceil(x + w)) + pad), min(image.shape[0], int(np.ceil(y + h)) + pad)
    return image[y0:y1, x0:x1] if x1 > x0 and y1 > y0 else image[:0, :0]


def _flat(pixels: np.ndarray) -> np.ndarray:
    flat = pixels.reshape(-1, 3)
    if len(flat) > MAX_SAMPLES:
        flat = flat[:: len(flat) // MAX_SAMPLES + 1]
    return flat


def mode_colour(pixels: np.ndarray) -> np.ndarray | None:
    flat = _flat(pixels).astype(np.int64)
    if not len(flat):
        return None
    packed = flat[:, 0] << 16 | flat[:, 1] << 8 | flat[:, 2]
    values, counts = np.unique(packed, return_counts=True)
    top = int(values[np.argmax(counts)])
    return np.array([top >> 16 & 255, top >> 8 & 255, top & 255], dtype=np.float64)


def drawn(image: np.ndarray, box: list[float]) -> bool:
    """Is anything but one flat colour drawn in `box` (and 2 px around it)?"""
    pixels = _crop(image, box, RING_PX)
    bg = mode_colour(pixels)
    if bg is None:
        return False
    return int((np.abs(_flat(pixels) - bg).max(axis=1) >= FLAT_DELTA).sum()) >= MIN_DRAWN_PIXELS


def background(image: np.ndarray, box: list[float]) -> np.ndarray | None:
    """The colour drawn around `box`: the mode of a ring of RING_PX outside it."""
    outer = _crop(image, box, RING_PX)
    if outer.size == 0:
        return None
    mask = np.ones(outer.shape[:2], dtype=bool)
    mask[RING_PX:-RING_PX or None, RING_PX:-RING_PX or None] = False
    ring = outer[mask] if mask.any() else outer.reshape(-1, 3)
    return mode_colour(ring.reshape(-1, 1, 3))


def _luminance(rgb: np.ndarray) -> np.ndarray:
    c = rgb / 255.0
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return c @ np.array([0.2126, 0.7152, 0.0722])


def ink_contrast(image: np.ndarray, box: list[float], bg: np.ndarray) -> float:
    """The WCAG ratio reached by the run's ink: the 98th percentile over the pixels of its box."""
    pixels = _flat(_crop(image, box)).astype(np.float64)
    if not len(pixels):
        return 1.0
    lum, lum_bg = _luminance(pixels), float(_luminance(bg[None, :])[0])
    ratio = (np.maximum(lum, lum_bg) + 0.05) / (np.minimum(lum, lum_bg) + 0.05)
    return float(np.percentile(ratio, 98))


def legible(image: np.ndarray | None, run: list) -> bool:
    """One text run [rects, rendered px, hit, text]: big enough, not covered, its ink visible."""
    rects, size, hit = run[0], run[1], run[2]
    if size < MIN_TEXT_PX or not hit:
        return False
    if image is None:
        return True
    for rect in rects:
        bg = background(image, rect)
        if bg is not None and ink_contrast(image, rect, bg) >= MIN_INK_CONTRAST:
            return True
    return False


def run_background(image: np.ndarray | None, run: list) -> tuple[float, float, float] | None:
    """The colour drawn behind a run (its first rect's ring), for the contrast check."""
    if image is None or not run[0]:
        return None
    bg = background(image, run[0][0])
    return None if bg is None else (float(bg[0]), float(bg[1]), float(bg[2]))


def painted(image: np.ndarray | None, record: dict) -> bool:
    """One measured element: hit-tested, something drawn in its box, and legible text if it has text."""
    if not record.get("hit"):
        return False
    if image is not None and not drawn(image, record["box"]):
        return False
    if record.get("textful"):
        return any(legible(image, run) for run in record["runs"])
    return True


def shown_text(image: np.ndarray | None, records: list[dict]) -> str:
    """The text a visitor can read in these elements: their legible runs, in document order."""
    return "".join(run[3] for record in records if painted(image, record) for run in record["runs"] if legible(image, run))


def legible_share(image: np.ndarray | None, runs: list[list]) -> float:
    """The share of the page's rendered text (by characters) a visitor can read; 1 with no text."""
    total = sum(len(run[3].strip()) for run in runs)
    if total == 0:
        return 1.0
    return sum(len(run[3].strip()) for run in runs if run[0] and legible(image, run)) / total
