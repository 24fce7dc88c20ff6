"""The music oracle: a seeded rule-based composer that writes a tune meeting a prompt's constraints.

A corpus tune under the prompt's header would be the easy answer, and the novelty check scores
it 0 (docs/music.md), so the oracle composes instead, the way a folk tune is put together:

- a chord progression per bar (I IV V vi ii), ending V I;
- plain rhythm cells per beat of the meter (two eighths or a quarter; three eighths, a quarter
  and an eighth or a dotted quarter in 6/8 and 9/8; four eighths to a half in 2/2), nothing
  starting off a beat and sounding past the next;
- a melodic contour of steps and leaps: a chord tone on each beat, steps and thirds between,
  a turn after a leap, inside the register the prompt's range allows;
- a phrase shape: the first bar comes back once (6 and 8 bars), the last bar lands on the tonic;
- a second voice, when asked for, is a bass line of chord tones below the melody.

Each candidate is checked before it is written, by the grader's own feature code on the notes
the composer knows (no abc2midi): the variety floors, the corpus bands and histograms, and the
n-gram look-up (so no run of it is a corpus tune). It is written so that a small model can copy
its counts instead of adding durations up: each voice opens with `% 3 beats a bar, 8 bars`, a
space follows every beat, and each bar has its line, numbered in a comment (`AB c2 de| % 3 of 8`);
from 160 demonstrations SFT copied the counts and still wrote bars of the wrong length; from
448 the held-out meter is met by 15% of SFT tunes and RL raises it (docs/music.md).
The best of up to `TRIES` candidates is
written; `rlyard envs validate music -o source=generated` then grades it through abc2midi like
any reply. `oracle(task, rng)` is `Family.oracle` (`rlyard collect`): the tune in one fenced
block after a short, seeded lead-in.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from rlyard.envs.music.abc import SCALES, parse_fraction, parse_meter
from rlyard.envs.music.constraints import MODE_WORDS, NOTE_NAMES, note_number
from rlyard.envs.music.corpus import BAND_WEIGHT, HISTOGRAM_WEIGHT, band_score, histogram_score, load_stats
from rlyard.envs.music.features import Midi, Note, features, mode_class
from rlyard.envs.music.novelty import copied
from rlyard.envs.music.variety import variety_features, variety_score
from rlyard.types import Task

TRIES = 40  # candidates per tune; the first that clears GOOD is written, else the best
GOOD = 0.8  # estimated quality (before constraints and novelty) that stops the search
VARIED = 0.95  # variety under this counts three times over in the estimate
LETTERS = "CDEFGAB"
TITLE_WORDS = (("The",), ("Merry", "Lonely", "Green", "Old", "Silver", "Windy", "Rocky", "Quiet", "Golden", "Dusty"),
               ("Road", "Harbour", "Meadow", "Piper", "Miller", "Lark", "Bridge", "Orchard", "Ferry", "Hill"))
# beat cells in eighth notes, by the beat's length in eighths, each with its weight
CELLS = {2.0: (((1, 1), 6), ((2,), 2)),                                  # a quarter beat
         3.0: (((1, 1, 1), 6), ((2, 1), 3), ((3,), 1)),                   # a dotted quarter (6/8, 9/8)
         4.0: (((1, 1, 1, 1), 4), ((2, 1, 1), 2), ((1, 1, 2), 2), ((2, 2), 2), ((4,), 1))}  # a half (2/2)
CHORDS = {"I": (0, 2, 4), "ii": (1, 3, 5), "IV": (3, 5, 0), "V": (4, 6, 1), "vi": (5, 0, 2)}
PROGRESSIONS = {6: (("I", "IV", "V", "I", "ii", "V"), ("I", "vi", "IV", "I", "IV", "V"), ("I", "V", "vi", "I", "IV", "V")),
                8: (("I", "IV", "V", "I", "I", "vi", "ii", "V"), ("I", "vi", "IV", "V", "I", "IV", "ii", "V"),
                    ("I", "V", "IV", "I", "I", "ii", "IV", "V"))}
LEAD_INS = ("", "", "Here is the tune.\n\n", "Here is a {bars}-bar tune in {key}.\n\n", "A short tune in {key}, {meter}:\n\n",
            "{title}, as asked:\n\n", "Here it is, {bars} bars in {meter}.\n\n")


@dataclass(frozen=True)
class Plan:
    """What the tune must be, read from the constraints (free ones drawn)."""

    tonic: str
    mode: str
    meter: str
    bars: int
    low: int  # MIDI, inclusive
    high: int
    voices: int
    title: str
    tempo: tuple[str, int] | None  # (beat, bpm)
    program: int | None


def plan_of(constraints: dict[str, dict[str, Any]], rng: random.Random) -> Plan:
    key = constraints.get("key") or {"tonic": rng.choice("DGAC"), "mode": "major"}
    span = constraints.get("range")
    title = constraints.get("title", {}).get("title") or " ".join(rng.choice(w) for w in TITLE_WORDS)
    tempo = constraints.get("tempo")
    return Plan(tonic=key["tonic"], mode=key["mode"], meter=constraints.get("meter", {}).get("meter", "4/4"),
                bars=int(constraints.get("bars", {}).get("bars", 8)),
                low=note_number(span["low"]) if span else 55, high=note_number(span["high"]) if span else 88,
                voices=int(constraints.get("voices", {}).get("voices", 1)), title=title,
                tempo=(tempo["beat"], int(tempo["bpm"])) if tempo else None,
                program=int(constraints["instrument"]["program"]) if "instrument" in constraints else None)


class Scale:
    """Diatonic degrees (0 = the tonic at `base`) to MIDI pitches and ABC note names under K:."""

    def __init__(self, tonic: str, mode: str, octave: int):
        self.letter = LETTERS.index(tonic[0])
        pc = (NOTE_NAMES[tonic[0]] + {"#": 1, "b": -1}.get(tonic[1:], 0)) % 12
        self.base = 12 * (octave + 1) + pc
        self.steps, self.octave = SCALES[mode], octave

    def pitch(self, degree: int) -> int:
        return self.base + self.steps[degree % 7] + 12 * (degree // 7)

    def name(self, degree: int) -> str:
        """The note's letter with ABC octave marks; K: supplies the sharps and flats (the tune is diatonic)."""
        position = self.letter + degree + 7 * self.octave
        octave, letter = divmod(position, 7)
        if octave >= 5:
            return LETTERS[letter].lower() + "'" * (octave - 5)
        return LETTERS[letter] + "," * (4 - octave)


def beats_of(meter: tuple[int, int]) -> tuple[int, float]:
    """(beats per bar, eighths per beat) of the meters the generator asks for. A simple
    meter has its numerator's count of beats (2/2: two half notes), a compound one a third of it."""
    numerator, denominator = meter
    if denominator == 8 and numerator % 3 == 0:
        return numerator // 3, 3.0
    return numerator, 8 / denominator


def bar_rhythm(meter: tuple[int, int], rng: random.Random, last: bool) -> list[float]:
    beats, size = beats_of(meter)
    cells = CELLS[size]
    rhythm: list[float] = []
    held = 2 if beats == 4 else 1  # the final tonic lasts the last beat (two in 4/4)
    for beat in range(beats - held if last else beats):
        rhythm += rng.choices([c for c, _ in cells], [w for _, w in cells])[0]
    if last:
        rhythm.append(held * size)
    return rhythm


def melody_bar(rhythm: list[float], chord: tuple[int, ...], current: int, window: tuple[int, int], beat: float,
               rng: random.Random, final: int | None) -> list[int]:
    """Degrees for one bar: a chord tone on each beat, steps and thirds between, turning after a leap."""
    low, high = window
    degrees, onset, direction = [], 0.0, rng.choice((-1, 1))
    for i, length in enumerate(rhythm):
        if final is not None and i == len(rhythm) - 1:
            nxt = final
        elif abs(onset / beat - round(onset / beat)) < 1e-9:
            tones = [d for d in range(low, high + 1) if d % 7 in chord and 0 < abs(d - current) <= 4]
            nxt = rng.choice(tones) if tones else current
        else:
            move = rng.choices((1, 2, 0), (0.62, 0.3, 0.08))[0]
            nxt = current + direction * move
            if not low <= nxt <= high:
                nxt = current - direction * move
        if nxt != current:
            moved = 1 if nxt > current else -1
            direction = -moved if abs(nxt - current) >= 2 or rng.random() < 0.35 else moved
        degrees.append(nxt)
        current, onset = nxt, onset + length
    return degrees


def compose_notes(plan: Plan, rng: random.Random) -> tuple[Scale, list[tuple[list[float], list[int]]], list[tuple[list[float], list[int]]]]:
    """(the scale, melody bars, bass bars), each bar (lengths in eighths, degrees)."""
    meter = parse_meter(plan.meter)
    octaves = [o for o in (3, 4, 5) if _window(Scale(plan.tonic, plan.mode, o), plan) is not None]
    if not octaves:
        raise ValueError(f"no register of {plan.tonic} {plan.mode} fits the range {plan.low}..{plan.high}")
    target = 76 if plan.voices == 2 else 72
    octaves.sort(key=lambda o: abs(_mid(Scale(plan.tonic, plan.mode, o), _window(Scale(plan.tonic, plan.mode, o), plan)) - target))
    octave = octaves[0] if len(octaves) == 1 or rng.random() < 0.7 else rng.choice(octaves[1:])
    scale = Scale(plan.tonic, plan.mode, octave)
    window = _window(scale, plan)
    tonics = [d for d in range(window[0], window[1] + 1) if d % 7 == 0]
    final = min(tonics, key=lambda d: abs(scale.pitch(d) - target + 4))
    progression = rng.choice(PROGRESSIONS.get(plan.bars) or PROGRESSIONS[8])
    chords = [progression[i % len(progression)] for i in range(plan.bars - 1)] + ["I"]
    beat = beats_of(meter)[1]
    melody: list[tuple[list[float], list[int]]] = []
    current = rng.choice([d for d in range(window[0], window[1] + 1) if d % 7 in CHORDS["I"]] or [final])
    repeat_at = {6: 3, 8: 4}.get(plan.bars)  # the first bar comes back here
    for index, chord in enumerate(chords):
        last = index == plan.bars - 1
        if index == repeat_at:
            rhythm, degrees = melody[0]
        else:
            rhythm = bar_rhythm(meter, rng, last)
            degrees = melody_bar(rhythm, CHORDS[chord], current, window, beat, rng, final if last else None)
        melody.append((rhythm, degrees))
        current = degrees[-1]
    bass = [bass_bar(meter, CHORDS[chord], scale, plan, window, rng, last=i == plan.bars - 1)
            for i, chord in enumerate(chords)] if plan.voices == 2 else []
    return scale, melody, bass


def bass_bar(meter: tuple[int, int], chord: tuple[int, ...], scale: Scale, plan: Plan, window: tuple[int, int],
             rng: random.Random, last: bool) -> tuple[list[float], list[int]]:
    """Chord tones below the melody: root, fifth, third on the beats (quarters, or two eighths)."""
    beats, size = beats_of(meter)
    tones = [d for d in range(window[0] - 7, window[0] + 2) if d % 7 in chord and plan.low <= scale.pitch(d) <= plan.high]
    tones = tones or [window[0]]
    root = [d for d in tones if d % 7 == chord[0]] or tones
    rhythm: list[float] = []
    degrees: list[int] = []
    for beat in range(beats):
        split = size == 2 and not last and rng.random() < 0.5
        parts = [1.0, 1.0] if split else ([2.0, size - 2.0] if size > 2 and rng.random() < 0.5 else [size])
        for part in parts:
            rhythm.append(part)
            degrees.append(rng.choice(root) if beat == 0 or last else rng.choice(tones))
    return rhythm, degrees


def _window(scale: Scale, plan: Plan) -> tuple[int, int] | None:
    """The melody's degrees: inside the range, at most a sixth below and a tenth above the tonic, a tonic inside."""
    degrees = [d for d in range(-5, 10) if plan.low <= scale.pitch(d) <= plan.high]
    if plan.voices == 2:  # about an octave over the bass, so both fit in the corpus's pitch range
        degrees = [d for d in degrees if -3 <= d <= 8]
    if not degrees or not any(d % 7 == 0 for d in degrees) or degrees[-1] - degrees[0] < (6 if plan.voices == 2 else 7):
        return None
    return degrees[0], degrees[-1]


def _mid(scale: Scale, window: tuple[int, int]) -> float:
    return (scale.pitch(window[0]) + scale.pitch(window[1])) / 2


def to_notes(scale: Scale, bars: list[tuple[list[float], list[int]]], voice: int) -> list[Note]:
    notes, start = [], 0.0
    for rhythm, degrees in bars:
        for length, degree in zip(rhythm, degrees):
            notes.append(Note(voice, start / 2, length / 2, scale.pitch(degree)))
            start += length
    return notes


def estimate(plan: Plan, scale: Scale, melody: list, bass: list) -> float:
    """Quality as the grader would read it, from the composer's own notes, times a novelty check."""
    meter = parse_meter(plan.meter)
    bar = meter[0] * 4 / meter[1]
    notes = to_notes(scale, melody, 0) + to_notes(scale, bass, 1)
    pitches = [n.pitch for n in notes]
    if min(pitches) < plan.low or max(pitches) > plan.high:
        return 0.0
    midi = Midi(notes, {}, meter, 120.0, plan.bars * bar, [0, 1][:plan.voices])
    values, histograms = features(midi, 0.0, (scale.base % 12, plan.mode))
    stats = load_stats()
    skip = frozenset({"bars", "voices", "polyphony"})
    band, _ = band_score(values, stats, skip)
    histogram, _ = histogram_score(histograms, mode_class(plan.mode), stats)
    variety, _ = variety_score(variety_features(notes, 0.0, bar), stats)
    share, run = copied(notes, bar)
    fresh = 1.0 if share <= 0.4 and run <= 3.0 else 0.0
    # plain rhythms repeat a bar's rhythm often: a tune short of full variety is not good enough
    return (BAND_WEIGHT * band + HISTOGRAM_WEIGHT * histogram) * variety ** (1 if variety >= VARIED else 3) * fresh


def write_abc(plan: Plan, scale: Scale, melody: list, bass: list, number: int = 1) -> str:
    """The tune in ABC: header, then the melody (and the bass as V:2), four bars a line."""
    key = f"{plan.tonic}{MODE_WORDS[plan.mode]}"
    lines = [f"X:{number}", f"T:{plan.title}", f"M:{plan.meter}", "L:1/8"]
    if plan.tempo:
        lines.append(f"Q:{plan.tempo[0]}={plan.tempo[1]}")
    lines.append(f"K:{key}")
    program = [f"%%MIDI program {plan.program}"] if plan.program is not None else []
    beats, beat = beats_of(parse_meter(plan.meter))
    if plan.voices == 2:
        lines += ["V:1", *program, *_body(scale, melody, beat, beats), "V:2", *_body(scale, bass, beat, beats)]
    else:
        lines += [*program, *_body(scale, melody, beat, beats)]
    return "\n".join(lines)


def _body(scale: Scale, bars: list[tuple[list[float], list[int]]], beat: float, beats: int) -> list[str]:
    """A comment with the count of beats (the meter's numerator, a third of it in 6/8 and 9/8) and
    bars, then one bar a line, a space after every beat, and the bar's number as a comment: the
    counts are then something to copy, not to add up (`% 3 beats a bar, 8 bars`, `AB c2 de| % 3 of 8`)."""
    lines = []
    for number, (rhythm, degrees) in enumerate(bars, 1):
        groups, text, elapsed = [], "", 0.0
        for x, d in zip(rhythm, degrees):
            text, elapsed = text + scale.name(d) + _length(x), elapsed + x
            if abs(elapsed / beat - round(elapsed / beat)) < 1e-9:
                groups.append(text)
                text = ""
        end = "|]" if number == len(bars) else "|"
        lines.append(" ".join(groups + ([text] if text else [])) + f"{end} % {number} of {len(bars)}")
    return [f"% {beats} beats a bar, {len(bars)} bars", *lines]


def _length(eighths: float) -> str:
    return {0.5: "/", 1: "", 1.5: "3/2", 2: "2", 3: "3", 4: "4", 6: "6"}[eighths]


def compose(constraints: dict[str, dict[str, Any]], rng: random.Random) -> str:
    """A tune meeting `constraints`: the first candidate estimated at `GOOD` or better, else the best of `TRIES`."""
    plan = plan_of(constraints, rng)
    if parse_meter(plan.meter) is None or (plan.tempo and parse_fraction(plan.tempo[0]) is None):
        raise ValueError(f"the oracle cannot write meter {plan.meter!r} / tempo {plan.tempo!r}")
    best, best_score = "", -1.0
    for _ in range(TRIES):
        scale, melody, bass = compose_notes(plan, rng)
        score = estimate(plan, scale, melody, bass)
        if score > best_score:
            best, best_score = write_abc(plan, scale, melody, bass), score
        if score >= GOOD:
            break
    return best


def oracle(task: Task, rng: random.Random) -> list[str]:
    """`Family.oracle`: one reply, the composed tune in a fenced block after a seeded lead-in."""
    constraints = task.payload["constraints"]
    tune = compose(constraints, rng)
    key = constraints.get("key")
    lead = rng.choice(LEAD_INS).format(
        bars=constraints.get("bars", {}).get("bars", 8), meter=constraints.get("meter", {}).get("meter", "4/4"),
        key=f"{key['tonic']} {key['mode']}" if key else "the key", title=constraints.get("title", {}).get("title", "The tune"))
    return [f"{lead}```abc\n{tune}\n```"]
