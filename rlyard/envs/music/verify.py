"""Grade a reply: the reject gate, then quality against the corpus, scaled by the prompt's constraints.

    quality = (0.85 * band score + 0.15 * histogram score) * variety   (the recipe's blend, gated)
    reward  = quality * (1 - w + w * constraint score) * novelty        (w = constraint_weight, 0.5)

`variety` (variety.py) is the product of floors and ceilings on the melody's variety, so a
scale, a walk or a riff that sits inside every band still scores near 0; `novelty`
(novelty.py) falls to 0 as more of the melody is found note for note in the corpus, so a corpus
tune under the prompt's header pays nothing. The reward before novelty is in info
(`reward_before_novelty`): the built-in references are corpus tunes, and validate reads it.

The constraint score is the share of the prompt's constraints met. Multiplying rather than
adding means neither half can be farmed alone: a tune that ignores the prompt keeps at most
half its quality, and meeting every constraint with a tune that is not music (one held note)
still pays only that tune's low quality. A rejected tune scores 0 with the reason as a
component (`gate_<reason>`) and abc2midi's own output in info; `rejected` (0 or 1) is in every
grade, so its mean over a step is the share of tunes the gate threw out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlyard.envs.music.abc import (MAX_ABC_CHARS, TIMEOUT_S, Abc2MidiMissing, Header, extract_tune, has_blank_line,
                                   parse_fraction, parse_header, parse_key, parse_meter, pickup_quarters, to_midi)
from rlyard.envs.music.constraints import Music, check_all
from rlyard.envs.music.corpus import BAND_WEIGHT, HISTOGRAM_WEIGHT, band_score, histogram_score, load_stats
from rlyard.envs.music.features import Midi, bar_quarters, features, mode_class, read_midi
from rlyard.envs.music.novelty import copied
from rlyard.envs.music.variety import variety_features, variety_score
from rlyard.types import Reward, Task

MAX_BAR_WARNINGS = 10  # this many "Bar N has" warnings reject the tune (the recipe's rule)
CONSTRAINT_WEIGHT = 0.5
# novelty: 1 up to the first value, 0 from the second (Essen folk songs, which the corpus does not hold, share
# at most 0.84 of their notes and 4.7 bars in a row with it, 99% of them at most 0.50 and 3.7; docs/music.md)
COPIED_SHARE = (0.5, 0.9)
COPIED_RUN_BARS = (4.0, 8.0)
SKIP_FOR = {"voices": frozenset({"voices", "polyphony"}), "bars": frozenset({"bars"})}  # band features a constraint decides instead


@dataclass
class Analysis:
    """A tune through the gate; `reject` is empty when it passed and `features` is then filled."""

    tune: str | None
    reject: str = ""  # the gate's reason, e.g. "no_midi"
    detail: str = ""
    header: Header | None = None
    midi: Midi | None = None
    features: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, list[float]] = field(default_factory=dict)
    variety: dict[str, float] = field(default_factory=dict)
    copied: float = 0.0  # share of the melody's notes inside an n-gram of the corpus
    copied_run_bars: float = 0.0  # the longest run of shared n-grams, in bars
    mode_class: str = "major"
    bar_warnings: int = 0
    console: str = ""


def analyse(tune: str | None, timeout_s: float = TIMEOUT_S, with_novelty: bool = True) -> Analysis:
    """The gate and the features of one tune; never raises for anything in the tune itself.
    `with_novelty=False` leaves `copied` at 0 (the corpus build, before the n-grams exist)."""
    if tune is None:
        return Analysis(None, "no_tune", "no X: line in the reply")
    if len(tune) > MAX_ABC_CHARS:
        return Analysis(tune, "too_long", f"{len(tune)} characters, at most {MAX_ABC_CHARS}")
    if has_blank_line(tune):
        return Analysis(tune, "blank_line", "a blank line inside the tune ends it early")
    converted = to_midi(tune, timeout_s)
    result = Analysis(tune, console=converted.console, bar_warnings=converted.bar_warnings)
    if converted.timed_out:
        result.reject, result.detail = "timeout", converted.errors[0]
    elif converted.midi is None:
        result.reject, result.detail = "no_midi", "; ".join(converted.errors[:5]) or "abc2midi wrote no MIDI file"
    elif converted.errors:
        result.reject, result.detail = "abc_error", "; ".join(converted.errors[:5])
    elif converted.bar_warnings >= MAX_BAR_WARNINGS:
        result.reject, result.detail = "bar_warnings", f"{converted.bar_warnings} bars do not fit the meter"
    if result.reject:
        return result
    try:
        midi = read_midi(converted.midi)
    except Exception as error:  # abc2midi's output that mido cannot read is the tune's doing
        result.reject, result.detail = "bad_midi", f"{type(error).__name__}: {error}"
        return result
    crowded = {channel: sorted(p) for channel, p in midi.programs.items() if len(p) > 1}
    if crowded:
        result.reject, result.detail = "multi_instrument", f"channel(s) given several instruments: {crowded}"
        return result
    if not midi.notes:
        result.reject, result.detail = "no_notes", "the MIDI has no notes"
        return result
    header = parse_header(tune)
    key = parse_key(header.first("K"))
    unit = parse_fraction(header.first("L")) or _default_unit(parse_meter(header.first("M")))
    pickup = pickup_quarters(header.body, unit, bar_quarters(midi.meter))
    values, histograms = features(midi, pickup, key)
    result.header, result.midi, result.features, result.histograms = header, midi, values, histograms
    result.variety = variety_features(midi.notes, pickup, bar_quarters(midi.meter))
    if with_novelty:
        result.copied, result.copied_run_bars = copied(midi.notes, bar_quarters(midi.meter))
    result.mode_class = mode_class(key[1]) if key else "major"
    return result


def _default_unit(meter: tuple[int, int] | None) -> float:
    """ABC's default L: a 1/16 note below a meter of 0.75, else 1/8."""
    return 1 / 16 if meter and meter[0] / meter[1] < 0.75 else 1 / 8


def quality(analysis: Analysis, skip: frozenset[str] = frozenset()) -> tuple[float, dict[str, float], dict[str, Any]]:
    """(quality, components, info) of a tune that passed the gate."""
    stats = load_stats()
    band, scores = band_score(analysis.features, stats, skip)
    histogram, divergences = histogram_score(analysis.histograms, analysis.mode_class, stats)
    variety, variety_scores = variety_score(analysis.variety, stats)
    value = (BAND_WEIGHT * band + HISTOGRAM_WEIGHT * histogram) * variety
    inside = sum(s == 1.0 for s in scores.values()) / len(scores)
    components = {"quality": value, "band": band, "band_inside": inside, "histogram": histogram, "variety": variety}
    info = {"features": {k: round(v, 4) for k, v in analysis.features.items()},
            "feature_scores": {k: round(v, 3) for k, v in scores.items()},
            "variety": {k: round(v, 4) for k, v in analysis.variety.items()},
            "variety_scores": {k: round(v, 3) for k, v in variety_scores.items()},
            "jsd": {k: round(v, 4) for k, v in divergences.items()}}
    return value, components, info


def novelty(analysis: Analysis) -> float:
    """1 for a tune that shares little with the corpus, falling to 0 for a copy (the lower of two ramps)."""
    def ramp(value: float, free: float, zero: float) -> float:
        return min(1.0, max(0.0, (zero - value) / (zero - free)))
    return min(ramp(analysis.copied, *COPIED_SHARE), ramp(analysis.copied_run_bars, *COPIED_RUN_BARS))


def grade(reply: str, constraints: dict[str, dict[str, Any]], constraint_weight: float = CONSTRAINT_WEIGHT,
          timeout_s: float = TIMEOUT_S) -> Reward:
    """The reward of `reply` for a prompt with `constraints` (see the module docstring)."""
    try:
        analysis = analyse(extract_tune(reply), timeout_s)
    except Abc2MidiMissing as error:
        return Reward(0.0, info={"error": str(error)}, infra_error=True)
    except OSError as error:  # the temp folder or the process could not be made: the machine's fault
        return Reward(0.0, info={"error": f"abc2midi could not run: {error}"}, infra_error=True)
    if analysis.reject:
        return Reward(0.0, components={"rejected": 1.0, f"gate_{analysis.reject}": 1.0},
                      info={"reject": analysis.reject, "detail": analysis.detail, "abc2midi": analysis.console[-2000:]})
    try:
        skip = frozenset().union(*(SKIP_FOR.get(kind, frozenset()) for kind in constraints))
        value, components, info = quality(analysis, skip)
        verdicts = check_all(constraints, Music(analysis.header, analysis.midi, analysis.features, analysis.bar_warnings))
    except Exception as error:  # a tune that passed the gate and still breaks the scoring is the grader's bug
        return Reward(0.0, info={"error": f"music scoring failed: {type(error).__name__}: {error}"}, infra_error=True)
    met = sum(ok for ok, _ in verdicts.values()) / len(verdicts) if verdicts else 1.0
    components["rejected"], components["constraints"] = 0.0, met
    components.update({f"constraint_{kind}": float(ok) for kind, (ok, _) in verdicts.items()})
    info["unmet"] = {kind: why for kind, (ok, why) in verdicts.items() if not ok}
    before = value * (1 - constraint_weight + constraint_weight * met)
    fresh = novelty(analysis)
    components["novelty"], components["copied"] = fresh, analysis.copied
    info["copied_run_bars"], info["reward_before_novelty"] = round(analysis.copied_run_bars, 2), before
    return Reward(before * fresh, components=components, info=info)


def verify(reply: str, task: Task) -> Reward:
    return grade(reply, task.payload["constraints"], float(task.payload["constraint_weight"]),
                 float(task.payload["timeout_s"]))
