"""The prompt's own constraints, each checked from the ABC header and from the music abc2midi made.

The recipe never checked these; a header alone is easy to write and says nothing about the
notes, so each check asks both where it can: a key is the K: field *and* notes in that key
ending on its tonic; a meter is the M: field *and* bars that fit it. A field set twice (a
second K: in the header, an inline [K:...] or a K: line in the body) fails its constraint, so
stuffing the header with every key or meter gains nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from rlyard.envs.music.abc import Header, parse_fraction, parse_key, parse_meter, written_bar_lines
from rlyard.envs.music.features import Midi

KINDS = ("key", "meter", "tempo", "bars", "voices", "range", "title", "instrument")
OUT_OF_SCALE_MAX = 0.2  # notes outside the asked key's scale (a raised leading tone in minor is one)
TEMPO_TOLERANCE = 0.05
NOTE_NAMES = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}
PITCH_NAMES = ("C", "C#", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B")
MODE_WORDS = {"major": "", "minor": "m", "dorian": "dor", "mixolydian": "mix", "phrygian": "phr", "lydian": "lyd",
              "locrian": "loc"}


@dataclass(frozen=True)
class Music:
    """What the checks read: the header as written, the MIDI as played, a few features."""

    header: Header
    midi: Midi
    features: dict[str, float]
    bar_warnings: int


def note_number(name: str) -> int:
    """MIDI number of a scientific pitch name: "C4" is 60, "F#5" is 78, "Bb3" is 58."""
    match = re.fullmatch(r"([A-G])([#b]?)(-?\d)", name)
    if not match:
        raise ValueError(f"pitch {name!r} is not a name such as C4, F#5 or Bb3")
    letter, accidental, octave = match.groups()
    return 12 * (int(octave) + 1) + NOTE_NAMES[letter] + {"#": 1, "b": -1, "": 0}[accidental]


def _key(spec: dict[str, Any], music: Music) -> tuple[bool, str]:
    wanted = parse_key(f"{spec['tonic']}{MODE_WORDS[spec['mode']]}")
    written = parse_key(music.header.first("K"))
    if music.header.count("K") != 1:
        return False, f"K: is set {music.header.count('K')} times"
    if written != wanted:
        return False, f"K:{music.header.first('K')} is not {spec['tonic']} {spec['mode']}"
    if music.features["out_of_scale"] > OUT_OF_SCALE_MAX:
        return False, f"{music.features['out_of_scale']:.0%} of the notes are outside the scale"
    end = max(n.end for n in music.midi.notes)
    if wanted[0] not in {n.pitch % 12 for n in music.midi.notes if abs(n.end - end) < 1e-9}:
        return False, "the tune does not end on the tonic"
    return True, ""


def _meter(spec: dict[str, Any], music: Music) -> tuple[bool, str]:
    wanted, written = parse_meter(spec["meter"]), parse_meter(music.header.first("M"))
    if music.header.count("M") != 1:
        return False, f"M: is set {music.header.count('M')} times"
    if written != wanted or music.midi.meter != wanted:
        return False, f"M:{music.header.first('M')} (MIDI {music.midi.meter[0]}/{music.midi.meter[1]}) is not {spec['meter']}"
    if music.bar_warnings:
        return False, f"{music.bar_warnings} bar(s) do not fit the meter"
    written, played = written_bar_lines(music.header.body), int(music.features.get("bars", 0))
    # abc2midi measures no first (pickup) or last bar, so one unbarred stream fits any meter; repeats
    # play written bars twice, hence played / 2. Open: huge first and last bars around one true bar.
    if written < played / 2 - 1:
        return False, f"{played} bars played but {written} bar line(s) written: bars must be marked for the meter to hold"
    return True, ""


def _tempo(spec: dict[str, Any], music: Music) -> tuple[bool, str]:
    if music.header.count("Q") != 1:
        return False, f"Q: is set {music.header.count('Q')} times"
    wanted = spec["bpm"] * 4 * parse_fraction(spec["beat"])
    played = music.midi.qpm
    if abs(played - wanted) > TEMPO_TOLERANCE * wanted:
        return False, f"{played:.0f} quarter notes a minute, asked {wanted:.0f}"
    return True, ""


def _bars(spec: dict[str, Any], music: Music) -> tuple[bool, str]:
    played = int(music.features["bars"])
    return played == spec["bars"], "" if played == spec["bars"] else f"{played} bars played, asked {spec['bars']}"


def _voices(spec: dict[str, Any], music: Music) -> tuple[bool, str]:
    played, written = len(music.midi.voice_channels), len(music.header.voices)
    if played != spec["voices"]:
        return False, f"{played} voice(s) play, asked {spec['voices']}"
    if written != spec["voices"] and not (spec["voices"] == 1 and written == 0):
        return False, f"{written} V: voice(s) written, asked {spec['voices']}"
    return True, ""


def _range(spec: dict[str, Any], music: Music) -> tuple[bool, str]:
    pitches = [n.pitch for n in music.midi.notes]
    low, high = note_number(spec["low"]), note_number(spec["high"])
    if min(pitches) < low or max(pitches) > high:
        return False, f"notes span {min(pitches)}..{max(pitches)}, asked {low}..{high}"
    return True, ""


def _title(spec: dict[str, Any], music: Music) -> tuple[bool, str]:
    written = " ".join((music.header.first("T") or "").split()).casefold()
    wanted = " ".join(spec["title"].split()).casefold()
    return written == wanted, "" if written == wanted else f"T:{music.header.first('T')!r}"


def _instrument(spec: dict[str, Any], music: Music) -> tuple[bool, str]:
    channel = music.midi.voice_channels[0]
    programs = music.midi.programs.get(channel, set())
    if programs != {spec["program"]}:
        return False, f"the first voice's programs are {sorted(programs) or 'the default'}, asked {spec['program']}"
    return True, ""


CHECKS: dict[str, Callable[[dict[str, Any], Music], tuple[bool, str]]] = {
    "key": _key, "meter": _meter, "tempo": _tempo, "bars": _bars, "voices": _voices, "range": _range,
    "title": _title, "instrument": _instrument}
REQUIRED = {"key": ("tonic", "mode"), "meter": ("meter",), "tempo": ("beat", "bpm"), "bars": ("bars",),
            "voices": ("voices",), "range": ("low", "high"), "title": ("title",), "instrument": ("program", "name")}


def check_all(constraints: dict[str, dict[str, Any]], music: Music) -> dict[str, tuple[bool, str]]:
    """{kind: (met, why not)} for every constraint of the prompt."""
    return {kind: CHECKS[kind](spec, music) for kind, spec in constraints.items()}


def validate_constraints(constraints: Any, where: str) -> dict[str, dict[str, Any]]:
    """The constraints of one prompt, checked; errors name the prompt and the field."""
    if not isinstance(constraints, dict) or not constraints:
        raise ValueError(f"{where}: constraints must be a non-empty mapping of {list(KINDS)}")
    for kind, spec in constraints.items():
        if kind not in CHECKS:
            raise ValueError(f"{where}: unknown constraint {kind!r}; allowed: {list(KINDS)}")
        missing = [f for f in REQUIRED[kind] if not isinstance(spec, dict) or f not in spec]
        if missing:
            raise ValueError(f"{where}: constraint {kind} needs {list(REQUIRED[kind])}, missing {missing}")
    if "key" in constraints and (constraints["key"]["mode"] not in MODE_WORDS
                                 or not re.fullmatch(r"[A-G][#b]?", str(constraints["key"]["tonic"]))):
        raise ValueError(f"{where}: key needs a tonic such as D, F# or Bb and a mode of {list(MODE_WORDS)}")
    if "meter" in constraints and parse_meter(str(constraints["meter"]["meter"])) is None:
        raise ValueError(f"{where}: meter {constraints['meter']['meter']!r} is not N/D, C or C|")
    if "tempo" in constraints and parse_fraction(str(constraints["tempo"]["beat"])) is None:
        raise ValueError(f"{where}: tempo beat {constraints['tempo']['beat']!r} is not a fraction such as 1/4")
    if "range" in constraints:
        note_number(constraints["range"]["low"]), note_number(constraints["range"]["high"])
    return constraints


def describe(constraints: dict[str, dict[str, Any]]) -> list[str]:
    """The prompt's lines, one per constraint, with the ABC a reader needs to meet it."""
    lines = []
    for kind, spec in constraints.items():
        if kind == "key":
            field = f"K:{spec['tonic']}{MODE_WORDS[spec['mode']]}"
            lines.append(f"key: {spec['tonic']} {spec['mode']} ({field}), ending on the tonic")
        elif kind == "meter":
            lines.append(f"meter: {spec['meter']} (M:{spec['meter']}), every bar full")
        elif kind == "tempo":
            lines.append(f"tempo: {spec['bpm']} beats per minute, the beat a {spec['beat']} note (Q:{spec['beat']}={spec['bpm']})")
        elif kind == "bars":
            lines.append(f"length: {spec['bars']} bars as played (a repeated part counts twice)")
        elif kind == "voices":
            lines.append(f"voices: {spec['voices']}" + (" (V:1 and V:2, both playing)" if spec["voices"] == 2 else ""))
        elif kind == "range":
            lines.append(f"range: every note between {spec['low']} and {spec['high']} (C4 is middle C)")
        elif kind == "title":
            lines.append(f"title: \"{spec['title']}\" (T:{spec['title']})")
        elif kind == "instrument":
            lines.append(f"instrument: {spec['name']} for the first voice (%%MIDI program {spec['program']})")
    return lines
