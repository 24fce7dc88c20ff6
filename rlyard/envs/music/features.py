"""What a tune's MIDI looks like, as numbers a reference corpus can bound.

Times are in quarter notes (the MIDI file's ticks per beat), so tempo never changes a feature;
abc2midi starts every note a tick late and a chord's notes 10 ticks apart, so a chord's notes
start with its first, and onsets and ends are snapped to a 1/24-quarter grid (32nds and 16th
triplets stay exact). Only abc2midi's "note
track"s (the tune's voices) are read: the chord accompaniment it makes from "G" chord symbols,
and drums or drones, are not the tune. Every definition is chosen so a test can count it by hand.
"""
from __future__ import annotations

import io
import math
from collections import Counter
from dataclasses import dataclass, field

import mido

from rlyard.envs.music.abc import SCALES

GRID = 24  # steps per quarter note
CHORD_TICKS = 40  # abc2midi sounds a chord's notes 10 ticks (of 480 a quarter) apart: they start with the first
DURATION_BINS = (0.125, 0.25, 1 / 3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)  # quarters
INTERVAL_CLIP = 12  # melodic intervals beyond an octave go to the end bins
# Krumhansl-Kessler key profiles (tonic first)
MAJOR_PROFILE = (6.35, 2.23, 3.48, 2.33, 4.38, 4.09, 2.52, 5.19, 2.39, 3.66, 2.29, 2.88)
MINOR_PROFILE = (6.33, 2.68, 3.52, 5.38, 2.60, 3.53, 2.54, 4.75, 3.98, 2.69, 3.34, 3.17)
MINOR_LIKE = ("minor", "dorian", "phrygian", "locrian")
FEATURES = ("note_density", "duration_entropy", "syncopation", "silence", "voices", "polyphony", "key_strength",
            "pitch_class_entropy", "out_of_scale", "pitch_range", "mean_pitch", "bars", "repetition")
GROUPS = {"rhythm": ("note_density", "duration_entropy", "syncopation", "silence"),
          "texture": ("voices", "polyphony"),
          "tonality": ("key_strength", "pitch_class_entropy", "out_of_scale"),
          "register": ("pitch_range", "mean_pitch"),
          "structure": ("bars", "repetition")}


@dataclass(frozen=True)
class Note:
    voice: int  # index of the note track, in file order
    start: float  # quarters from the first event
    length: float  # quarters
    pitch: int  # MIDI number

    @property
    def end(self) -> float:
        return self.start + self.length


@dataclass
class Midi:
    """The parts of abc2midi's file the grader reads."""

    notes: list[Note]
    programs: dict[int, set[int]]  # channel -> every program it is switched to, all tracks
    meter: tuple[int, int]  # the first time signature (4/4 if none)
    qpm: float  # quarter notes per minute of the first tempo (120 if none)
    end: float  # quarters: the last note's end or the end of the longest track, whichever is later
    voice_channels: list[int] = field(default_factory=list)  # the channel of each voice's first note


def read_midi(data: bytes) -> Midi:
    """Notes of the voice tracks, program changes of every track; raises on a file mido cannot read."""
    song = mido.MidiFile(file=io.BytesIO(data))
    step = song.ticks_per_beat / GRID
    notes, programs, meter, tempo, end, channels = [], {}, None, None, 0.0, []
    for track in song.tracks:
        ticks, sounding, is_voice, has_notes, first_channel = 0, {}, True, False, 0
        chord_raw, chord_start = -10**9, 0
        for message in track:
            ticks += message.time
            if message.type == "text" and ticks == 0 and "note track" not in message.text:
                is_voice = is_voice and not message.text.endswith("track")
            elif message.type == "time_signature" and meter is None:
                meter = (message.numerator, message.denominator)
            elif message.type == "set_tempo" and tempo is None:
                tempo = message.tempo
            elif message.type == "program_change":
                programs.setdefault(message.channel, set()).add(message.program)
            elif message.type == "note_on" and message.velocity > 0:
                if ticks - chord_raw > CHORD_TICKS * song.ticks_per_beat / 480:  # not the next note of a chord
                    chord_raw, chord_start = ticks, ticks
                sounding.setdefault((message.channel, message.note), []).append(chord_start)
            elif message.type in ("note_off", "note_on"):
                starts = sounding.get((message.channel, message.note))
                if starts and is_voice:
                    start = round(starts.pop(0) / step) / GRID
                    stop = max(round(ticks / step) / GRID, start + 1 / GRID)
                    notes.append(Note(len(channels), start, stop - start, message.note))
                    if not has_notes:
                        has_notes = True
                        first_channel = message.channel
                elif starts:
                    starts.pop(0)
        end = max(end, math.floor(ticks / song.ticks_per_beat * 8) / 8)  # abc2midi ends a track ~26 ticks late
        if has_notes:
            channels.append(first_channel)
    notes.sort(key=lambda n: (n.start, n.voice, -n.pitch))
    end = max([end, *(n.end for n in notes)])
    qpm = 60_000_000 / tempo if tempo else 120.0
    return Midi(notes, programs, meter or (4, 4), qpm, end, channels)


def bar_quarters(meter: tuple[int, int]) -> float:
    return meter[0] * 4 / meter[1]


def beat_quarters(meter: tuple[int, int]) -> float:
    """The felt beat: a dotted quarter in 6/8, 9/8, 12/8; else the meter's denominator."""
    numerator, denominator = meter
    if denominator == 8 and numerator in (6, 9, 12):
        return 1.5
    return 4 / denominator


def entropy_bits(counts: Counter) -> float:
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values() if c) if total else 0.0


def duration_bin(length: float) -> int:
    return min(range(len(DURATION_BINS)), key=lambda i: abs(math.log2(length / DURATION_BINS[i])))


def melody_intervals(notes: list[Note]) -> list[int]:
    """Steps between successive onsets of each voice, the top note of a chord standing for it."""
    steps = []
    for voice in sorted({n.voice for n in notes}):
        tops: dict[float, int] = {}
        for note in notes:
            if note.voice == voice:
                tops[note.start] = max(tops.get(note.start, -1), note.pitch)
        line = [tops[t] for t in sorted(tops)]
        steps += [max(-INTERVAL_CLIP, min(INTERVAL_CLIP, b - a)) for a, b in zip(line, line[1:])]
    return steps


def melody(notes: list[Note]) -> list[Note]:
    """The first voice, one note per onset (the top note of a chord): the line a listener follows."""
    tops: dict[float, Note] = {}
    for note in notes:
        if note.voice == 0 and (note.start not in tops or note.pitch > tops[note.start].pitch):
            tops[note.start] = note
    return [tops[t] for t in sorted(tops)]


def key_strength(weights: list[float]) -> tuple[float, int, str]:
    """The best Pearson correlation of the pitch-class weights with the 24 Krumhansl-Kessler keys."""
    best = (-1.0, 0, "major")
    for mode, profile in (("major", MAJOR_PROFILE), ("minor", MINOR_PROFILE)):
        for tonic in range(12):
            rotated = [profile[(pc - tonic) % 12] for pc in range(12)]
            best = max(best, (_pearson(weights, rotated), tonic, mode))
    return best


def _pearson(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy) if sx and sy else 0.0


def sounding_length(notes: list[Note]) -> float:
    """Quarters during which at least one note sounds (the union of the notes' spans)."""
    covered, reach = 0.0, -math.inf
    for note in sorted(notes, key=lambda n: n.start):
        if note.end > reach:
            covered += note.end - max(note.start, reach)
            reach = note.end
    return covered


def bar_signatures(notes: list[Note], pickup: float, bar: float) -> list[tuple]:
    """Each full bar's notes (voice, onset in the bar, length, pitch); the pickup is not a bar."""
    bars: dict[int, list] = {}
    for note in notes:
        index = math.floor((note.start - pickup) / bar + 1e-9)
        if index >= 0:
            bars.setdefault(index, []).append((note.voice, round(note.start - pickup - index * bar, 4), note.length, note.pitch))
    return [tuple(bars.get(i, ())) for i in range(max(bars) + 1)] if bars else []


def features(midi: Midi, pickup: float, key: tuple[int, str] | None) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The 13 features and the 3 histograms (pitch class from the tonic, interval, duration) of a tune.

    `pickup`: the anacrusis in quarters (`abc.pickup_quarters`); `key`: the K: field's (tonic,
    mode), or None to use the best-correlated key. Raises ValueError on a tune without notes.
    """
    notes = midi.notes
    if not notes:
        raise ValueError("the MIDI has no notes")
    bar, beat = bar_quarters(midi.meter), beat_quarters(midi.meter)
    voices = max(1, len(midi.voice_channels))
    weights = [0.0] * 12
    for note in notes:
        weights[note.pitch % 12] += note.length
    strength, best_tonic, best_mode = key_strength(weights)
    tonic, mode = key or (best_tonic, best_mode)
    scale = {(tonic + step) % 12 for step in SCALES[mode]}
    syncopated = 0
    for note in notes:
        offset = (note.start - pickup) / beat
        next_beat = (math.floor(offset + 1e-9) + 1) * beat + pickup
        if abs(offset - round(offset)) > 1e-6 and note.end > next_beat + 1e-9:
            syncopated += 1
    signatures = bar_signatures(notes, pickup, bar)
    played = [s for s in signatures if s]
    repeats = sum(1 for i, s in enumerate(played) if s in played[:i])
    pitches = [n.pitch for n in notes]
    values = {
        "note_density": len(notes) / (midi.end * voices),
        "duration_entropy": entropy_bits(Counter(duration_bin(n.length) for n in notes)),
        "syncopation": syncopated / len(notes),
        "silence": 1 - sounding_length(notes) / midi.end,
        "voices": float(voices),
        "polyphony": sum(n.length for n in notes) / sounding_length(notes),
        "key_strength": strength,
        "pitch_class_entropy": entropy_bits(Counter(p % 12 for p in pitches)),
        "out_of_scale": sum(1 for p in pitches if p % 12 not in scale) / len(pitches),
        "pitch_range": float(max(pitches) - min(pitches)),
        "mean_pitch": sum(pitches) / len(pitches),
        "bars": float(round(midi.end / bar)),
        "repetition": repeats / len(played) if played else 0.0,
    }
    histograms = {
        "pitch_class": _normalised(Counter((p - tonic) % 12 for p in pitches), 12),
        "interval": _normalised(Counter(s + INTERVAL_CLIP for s in melody_intervals(notes)), 2 * INTERVAL_CLIP + 1),
        "duration": _normalised(Counter(duration_bin(n.length) for n in notes), len(DURATION_BINS)),
    }
    return values, histograms


def mode_class(mode: str) -> str:
    """Which corpus pitch-class histogram a mode is compared with."""
    return "minor" if mode in MINOR_LIKE else "major"


def _normalised(counts: Counter, size: int) -> list[float]:
    total = sum(counts.values())
    return [counts.get(i, 0) / total if total else 0.0 for i in range(size)]
