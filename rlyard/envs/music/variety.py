"""Variety floors: the melody must move like music, and one degenerate trait sinks the tune.

The bands of `corpus.py` are first-order statistics, averaged within a group: a scale, a
stepwise random walk or a two-bar riff sits inside every one of them (scores of 0.97 against
references of 0.97). These features read the melody line (`features.melody`) for the traits
such tunes lack or overdo, and their scores are *multiplied*, so no other feature can make up
for one of them:

| feature | what it catches |
|---|---|
| `distinct_pitches` (floor) | a repeated note, an arpeggio loop, a riff on a few notes |
| `step_share` (ceiling) | a scale, a stepwise walk: (almost) every interval 1 or 2 semitones |
| `leap_share` (floor and ceiling) | no leap at all (walks, scales); leaps everywhere (arpeggios, random notes) |
| `interval_entropy` (ceiling) | intervals drawn at random |
| `turns` (floor) | a line that only rarely changes direction (a scale) |
| `pitch_corr` (floor) | successive pitches unrelated (random notes): melodies move near where they were |
| `near_repeat` (ceiling) | bars that come back with one note changed, over and over (a riff) |
| `bar_ideas` (floor) | fewer than a handful of different bars in the whole tune |

Each limit is a percentile of the corpus sample (`builtin/corpus_stats.json`, "variety"),
set far out (0.2 to 1 and 99 to 99.5) so the corpus's own unusual tunes keep their score;
past it a feature falls linearly to 0 over its `decay` (a natural unit of that feature).
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

from rlyard.envs.music.features import Note, _pearson, entropy_bits, melody

NEAR = 0.5  # a bar with the rhythm of an earlier one and at least this share of its pitches is a near repeat
# feature: (low percentile, high percentile, decay below, decay above); None = no limit on that side
LIMITS: dict[str, tuple[float | None, float | None, float, float]] = {
    "distinct_pitches": (1, None, 2.0, 0.0),
    "step_share": (None, 99.5, 0.0, 0.3),
    "leap_share": (0.2, 99.5, 0.08, 0.15),
    "interval_entropy": (None, 99, 0.0, 0.4),
    "turns": (0.5, None, 0.3, 0.0),
    "pitch_corr": (1, None, 0.3, 0.0),
    "near_repeat": (None, 99, 0.0, 0.15),
    "bar_ideas": (1, None, 2.0, 0.0),
}


def variety_features(notes: list[Note], pickup: float, bar: float) -> dict[str, float]:
    """The eight features of the melody line (see the module docstring)."""
    line = melody(notes)
    steps = [b.pitch - a.pitch for a, b in zip(line, line[1:])]
    moving = [s for s in steps if s]
    count = max(1, len(steps))
    pitches = [n.pitch for n in line]
    bars: dict[int, list[tuple[float, int]]] = {}
    for note in line:
        index = math.floor((note.start - pickup) / bar + 1e-9)
        if index >= 0:
            bars.setdefault(index, []).append((round(note.start - pickup - index * bar, 3), note.pitch))
    played = [tuple(bars[i]) for i in sorted(bars)]
    near = ideas = 0
    for i, current in enumerate(played):
        rhythm, best = [o for o, _ in current], 0.0
        for earlier in played[:i]:
            if [o for o, _ in earlier] == rhythm:
                best = max(best, sum(p == q for (_, p), (_, q) in zip(current, earlier)) / len(current))
        near += NEAR <= best < 1
        ideas += best < NEAR
    return {
        "distinct_pitches": float(len(set(pitches))),
        "step_share": sum(1 <= abs(s) <= 2 for s in steps) / count,
        "leap_share": sum(abs(s) >= 3 for s in steps) / count,
        "interval_entropy": entropy_bits(Counter(max(-12, min(12, s)) for s in steps)),
        "turns": sum((a > 0) != (b > 0) for a, b in zip(moving, moving[1:])) / max(1, len(moving) - 1),
        "pitch_corr": _pearson(pitches[:-1], pitches[1:]) if len(pitches) > 3 else 0.0,
        "near_repeat": near / max(1, len(played)),
        "bar_ideas": float(ideas),
    }


def variety_score(values: dict[str, float], stats: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """(the product of the feature scores, {feature: its score})."""
    scores, total = {}, 1.0
    for name, limit in stats["variety"].items():
        value, low, high = values[name], limit["low"], limit["high"]
        if low is not None and value < low:
            score = max(0.0, 1 - (low - value) / limit["decay_low"])
        elif high is not None and value > high:
            score = max(0.0, 1 - (value - high) / limit["decay_high"])
        else:
            score = 1.0
        scores[name] = score
        total *= score
    return total, scores


def variety_limits(rows: list[dict[str, float]], percentile: Any) -> dict[str, dict[str, float | None]]:
    """The limits of `LIMITS` read off the corpus sample's features (`percentile(values, q)`)."""
    limits = {}
    for name, (low, high, decay_low, decay_high) in LIMITS.items():
        values = [row[name] for row in rows]
        limits[name] = {"low": None if low is None else round(percentile(values, low), 4),
                        "high": None if high is None else round(percentile(values, high), 4),
                        "decay_low": decay_low, "decay_high": decay_high}
    return limits
