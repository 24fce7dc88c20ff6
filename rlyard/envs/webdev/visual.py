"""Visual similarity to the reference screenshot: SSIM on small grayscale images, rescaled.

Screenshots are compared at a quarter of their size (4 x 4 block means: 1440 px wide -> 360),
in grayscale in [0, 1]; the page is cut or padded with white to the reference's height, since
full pages differ in length. The reference is stored already reduced (`reference.png` in a
task's folder, 360 px wide, made by scripts/webdev/make_references.py), so the package stays
small and the reference is never rendered again at grading.

Raw SSIM flatters a blank page: most of a reference is background, and a flat page of the
background colour matches most of it. The check's score is therefore SSIM rescaled so that the
best flat page (white, black, or the reference's own dominant or mean shade) scores 0 and the
reference itself 1: max(0, (ssim - ssim_flat) / (1 - ssim_flat)).

The visual gate (verify.py) works on the same images: a screenshot that is near-uniform (under
MIN_DRAWN_SHARE of its reduced pixels away from its dominant shade) shows nothing and scores 0;
one far from the reference caps the fit at visual / VISUAL_FLOOR.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

SCALE = 4  # block size of the reduction
MIN_SIDE = 7  # SSIM's window; smaller images cannot be compared
SHADE_DELTA = 0.04  # a reduced pixel this far from the dominant shade shows something
MIN_DRAWN_SHARE = 0.001  # a screenshot with less than this share of such pixels shows nothing (a lone "Hello" h1: 0.17%)
VISUAL_FLOOR = 0.2  # below this visual score the fit is capped at visual / VISUAL_FLOOR
SAME_TOLERANCE = 1e-9  # an SSIM this close to 1 is an identical image's, up to float rounding


def gray(png: bytes) -> np.ndarray:
    """A PNG as grayscale in [0, 1] (ITU-R 709 luma, the weights of skimage's rgb2gray)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png))
    image.load()
    rgb = np.asarray(image.convert("RGBA"), dtype=np.float64) / 255.0
    alpha = rgb[..., 3:4]
    rgb = rgb[..., :3] * alpha + (1.0 - alpha)  # transparency over white
    return rgb @ np.array([0.2125, 0.7154, 0.0721])


def reduce(image: np.ndarray, scale: int = SCALE) -> np.ndarray:
    """Block means of `scale` x `scale` pixels (the ragged right and bottom edges dropped)."""
    h, w = image.shape[0] // scale * scale, image.shape[1] // scale * scale
    return image[:h, :w].reshape(h // scale, scale, w // scale, scale).mean(axis=(1, 3))


def fit_to(image: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """`image` cut or padded with white (1.0) to `shape`."""
    out = np.ones(shape, dtype=np.float64)
    h, w = min(shape[0], image.shape[0]), min(shape[1], image.shape[1])
    out[:h, :w] = image[:h, :w]
    return out


def ssim(candidate: np.ndarray, reference: np.ndarray) -> float:
    """SSIM of `candidate` (cut / padded to the reference's shape) against `reference`, data range 1."""
    from skimage.metrics import structural_similarity

    if min(reference.shape) < MIN_SIDE:
        raise ValueError(f"reference image {reference.shape} is smaller than SSIM's {MIN_SIDE} px window")
    value = float(structural_similarity(fit_to(candidate, reference.shape), reference, data_range=1.0))
    # an identical image comes out 1 - 1e-13 or so in floats; it is 1 (a reference page then scores
    # exactly 1.0, which `rlyard collect` requires of a demonstration)
    return 1.0 if value > 1.0 - SAME_TOLERANCE else value


def rescaled(raw: float, blank: float) -> float:
    """0 for a blank page, 1 for the reference; below a blank page is 0."""
    if blank >= 1.0:
        return float(raw >= 1.0)
    return min(1.0, max(0.0, (raw - blank) / (1.0 - blank)))


def load_reference(path: Path) -> np.ndarray:
    """A stored reference: already reduced grayscale."""
    return gray(Path(path).read_bytes())


def reference_png(screenshot: bytes) -> bytes:
    """What make_references.py stores for a full-size screenshot: reduced, 8-bit grayscale."""
    from PIL import Image

    small = np.clip(np.rint(reduce(gray(screenshot)) * 255.0), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(small).save(out, format="PNG", optimize=True)
    return out.getvalue()


def dominant(image: np.ndarray) -> float:
    """The most frequent shade of a reduced grayscale image (to 1/255)."""
    values, counts = np.unique(np.rint(image * 255.0), return_counts=True)
    return float(values[np.argmax(counts)]) / 255.0


def flat_baseline(reference: np.ndarray) -> float:
    """The SSIM of the best flat page against the reference: what showing nothing earns."""
    shades = {1.0, 0.0, dominant(reference), float(np.rint(reference.mean() * 255.0) / 255.0)}
    return max(ssim(np.full_like(reference, shade), reference) for shade in shades)


def drawn_share(screenshot: bytes) -> float:
    """The share of the reduced screenshot's pixels away from its dominant shade."""
    image = np.rint(reduce(gray(screenshot)) * 255.0) / 255.0
    if image.size == 0:
        return 0.0
    return float((np.abs(image - dominant(image)) > SHADE_DELTA).mean())


def visual_cap(visual: float | None) -> float:
    """The most a page this far from its reference may score (1 without a reference)."""
    return 1.0 if visual is None else min(1.0, visual / VISUAL_FLOOR)


def visual_score(screenshot: bytes, reference: np.ndarray) -> tuple[float, float]:
    """(rescaled score, raw SSIM) of a full-size screenshot against a stored reference."""
    candidate = np.rint(reduce(gray(screenshot)) * 255.0) / 255.0  # quantised as the stored reference was
    raw = ssim(candidate, reference)
    return rescaled(raw, flat_baseline(reference)), raw
