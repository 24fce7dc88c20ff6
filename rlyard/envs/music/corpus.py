"""The reference corpus as data: per-feature percentile bands and mean histograms, and how a
tune is scored against them.

`builtin/corpus_stats.json` is written by `scripts/music/build_corpus.py` from the folk-tune
collections music21 ships in ABC; grading only reads it, so training needs no music21. A
feature inside its [p5, p95] band scores 1; outside, it falls linearly to 0 at half a band
width beyond the edge (`DECAY`; a floor on the width keeps near-constant features, such as
silence, from being all or nothing). Features are averaged within their group (rhythm, texture, tonality, register,
structure) and the groups multiplied, so a tune must look like the corpus in every respect: a
single held note is in band for density and texture but fails tonality, register and rhythm.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from rlyard.envs.music.features import FEATURES, GROUPS
from rlyard.envs.music.variety import LIMITS

BUILTIN = Path(__file__).parent / "builtin"
STATS_PATH = BUILTIN / "corpus_stats.json"
SAMPLE_PATH = BUILTIN / "corpus_sample.abc"
BAND_WEIGHT, HISTOGRAM_WEIGHT = 0.85, 0.15  # the recipe's blend
LOW, HIGH = 5, 95  # percentiles of a band
DECAY = 0.5  # a feature scores 0 this many band widths beyond its band
# the smallest band width a distance is measured in (a feature's natural unit)
WIDTH_FLOOR = {"note_density": 0.5, "duration_entropy": 0.5, "syncopation": 0.1, "silence": 0.1, "voices": 1.0,
               "polyphony": 0.5, "key_strength": 0.2, "pitch_class_entropy": 0.5, "out_of_scale": 0.1,
               "pitch_range": 6.0, "mean_pitch": 6.0, "bars": 8.0, "repetition": 0.2}


@lru_cache(maxsize=4)
def load_stats(path: str | None = None) -> dict[str, Any]:
    """The corpus statistics; errors name the file and the missing part."""
    source = Path(path) if path else STATS_PATH
    try:
        stats = json.loads(source.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"music corpus statistics {source}: {error} (scripts/music/build_corpus.py writes them)") from None
    missing = [f for f in FEATURES if f not in stats.get("bands", {})]
    missing += [h for h in ("pitch_class_major", "pitch_class_minor", "interval", "duration") if h not in stats.get("histograms", {})]
    missing += [f"variety.{v}" for v in LIMITS if v not in stats.get("variety", {})]
    if missing:
        raise ValueError(f"music corpus statistics {source}: missing {missing}")
    return stats


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), so the bands need no numpy to rebuild."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def feature_score(name: str, value: float, band: dict[str, float]) -> float:
    low, high = band["low"], band["high"]
    if low <= value <= high:
        return 1.0
    distance = low - value if value < low else value - high
    return max(0.0, 1.0 - distance / (DECAY * max(high - low, WIDTH_FLOOR[name])))


def band_score(values: dict[str, float], stats: dict[str, Any], skip: frozenset[str] = frozenset()) -> tuple[float, dict[str, float]]:
    """(product of the group means, {feature: its score}); features in `skip` are left out
    (a prompt's constraint decides them, e.g. voices when it asks for two)."""
    scores = {name: feature_score(name, values[name], stats["bands"][name]) for name in FEATURES if name not in skip}
    total = 1.0
    for members in GROUPS.values():
        kept = [scores[m] for m in members if m in scores]
        if kept:
            total *= sum(kept) / len(kept)
    return total, scores


def jensen_shannon(p: list[float], q: list[float]) -> float:
    """Jensen-Shannon divergence in bits (0 for equal distributions, 1 for disjoint ones)."""
    total = 0.0
    for a, b in zip(p, q):
        m = (a + b) / 2
        if a:
            total += 0.5 * a * math.log2(a / m)
        if b:
            total += 0.5 * b * math.log2(b / m)
    return max(0.0, min(1.0, total))


def histogram_score(histograms: dict[str, list[float]], mode_class: str, stats: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """1 - the mean Jensen-Shannon divergence of the tune's three histograms from the corpus's."""
    reference = stats["histograms"]
    divergences = {"pitch_class": jensen_shannon(histograms["pitch_class"], reference[f"pitch_class_{mode_class}"]),
                   "interval": jensen_shannon(histograms["interval"], reference["interval"]),
                   "duration": jensen_shannon(histograms["duration"], reference["duration"])}
    return 1.0 - sum(divergences.values()) / 3, divergences


def split_tunes(text: str) -> list[str]:
    """The tunes of an ABC collection: each from its X: line to the next blank line."""
    tunes, current = [], None
    for line in text.splitlines():
        if line.startswith("X:"):
            if current:
                tunes.append("\n".join(current).rstrip())
            current = [line]
        elif current is not None:
            if not line.strip():
                tunes.append("\n".join(current).rstrip())
                current = None
            else:
                current.append(line)
    if current:
        tunes.append("\n".join(current).rstrip())
    return tunes
