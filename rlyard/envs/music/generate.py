"""Generated music prompts (`env.options.source: generated`): the constraint grammar, sampled and phrased.

Every prompt asks for a key, a meter and a short length (6 or 8 bars, so a small model can
write the tune in a few hundred tokens), and some of: a tempo, a title, an instrument, a range,
a number of voices. The constraints are the prompt's only parameters, graded by the same
`verify` as the built-in prompts (the rows have the built-in rows' shape).

Held-out prompts are unseen *combinations*: a (key, meter) pair is eval when the stable hash of
the pair (`split_of("music-generated", "D major|6/8", eval_percent)`) says so, and a train
prompt is never drawn from an eval pair, so success on eval is a key and meter the policy was
never shown together. The eval stream does not depend on `seed` (every run evaluates the same
prompts); the train stream does. A prompt's id is a hash of its constraints, and its wording
(one of several phrasings per constraint, a list or a sentence) is drawn from that hash, so
the same parameters always read the same.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from functools import lru_cache
from typing import Any

from rlyard.envs.splits import split_of

MAX_N = 100_000  # the universe is far larger; a bigger n is a mistake (validate with no -n asks 10**9)
KEYS = (("C", "major"), ("G", "major"), ("D", "major"), ("A", "major"), ("E", "major"), ("F", "major"),
        ("Bb", "major"), ("Eb", "major"), ("A", "minor"), ("E", "minor"), ("B", "minor"), ("D", "minor"),
        ("G", "minor"), ("C", "minor"), ("F#", "minor"), ("D", "dorian"), ("E", "dorian"), ("A", "dorian"),
        ("G", "dorian"), ("G", "mixolydian"), ("D", "mixolydian"), ("A", "mixolydian"), ("C", "mixolydian"))
METERS = ("2/4", "3/4", "4/4", "6/8", "9/8", "2/2")
BARS = (6, 8)
BPM = {"1/4": (72, 84, 96, 100, 108, 120, 132), "3/8": (60, 72, 80, 92, 100, 112), "1/2": (56, 60, 66, 72, 80)}
INSTRUMENTS = ((0, "piano"), (6, "harpsichord"), (21, "accordion"), (22, "harmonica"), (24, "nylon guitar"),
               (40, "violin"), (41, "viola"), (46, "harp"), (68, "oboe"), (71, "clarinet"), (73, "flute"),
               (74, "recorder"), (75, "pan flute"), (78, "whistle"), (105, "banjo"), (109, "bagpipe"))
ADJECTIVES = ("Merry", "Lonely", "Green", "Old", "Silver", "Windy", "Rocky", "Quiet", "Golden", "Dusty", "Distant",
              "Bonny", "Wild", "Morning", "Stony", "Hidden", "Northern", "Crooked", "Gentle", "Humble")
NOUNS = ("Road", "Harbour", "Meadow", "Piper", "Miller", "Lark", "Bridge", "Orchard", "Ferry", "Hill", "Glen", "Weaver",
         "Lantern", "Shepherd", "Island", "Kettle", "Fiddler", "Tide", "Heather", "Chapel")
RANGES_ONE = {"low": ("A3", "B3", "C4", "D4", "E4"), "high": ("G5", "A5", "B5", "C6")}
RANGES_TWO = {"low": ("G3", "A3", "B3"), "high": ("A5", "B5", "C6")}  # room for a bass below the melody
OPTIONAL = {"tempo": 0.5, "title": 0.5, "instrument": 0.4, "range": 0.35, "voices": 0.15}

INTROS = ("Compose a short folk tune in ABC notation (it will be played with abc2midi).",
          "Write a folk melody in ABC notation.", "I need a little tune written in ABC notation.",
          "Please compose an original folk tune, notated in ABC.", "Make up a short dance tune and write it in ABC.",
          "Write an original melody in ABC notation for abc2midi.")
OUTROS = ("Reply with the whole tune, from its X: line to its last bar, in one ```abc fenced block.",
          "Put the complete tune, X: line first, in a single ```abc block.",
          "Answer with the ABC in one fenced ```abc block, from X: to the final bar.",
          "Give the full tune in one ```abc code block.")
PHRASES: dict[str, tuple[str, ...]] = {
    "key": ("key: {tonic} {mode} (K:{field}), ending on the tonic", "in {tonic} {mode} (K:{field}), ending on {tonic}",
            "set in {tonic} {mode}: write K:{field} and finish on the tonic",
            "{tonic} {mode} (header K:{field}), with the last note on {tonic}"),
    "meter": ("meter: {meter} (M:{meter}), every bar full", "in {meter} time (M:{meter}), each bar complete",
              "with M:{meter} and every bar filled", "time signature {meter} (M:{meter})"),
    "bars": ("length: {bars} bars as played (a repeated part counts twice)", "exactly {bars} bars long, no repeats",
             "{bars} bars in all", "just {bars} bars"),
    "tempo": ("tempo: {bpm} beats per minute, the beat a {beat} note (Q:{beat}={bpm})", "at Q:{beat}={bpm}",
              "played at {bpm} beats a minute ({beat} beat, Q:{beat}={bpm})"),
    "title": ("title: \"{title}\" (T:{title})", "called \"{title}\" (T:{title})", "with the title {title} (T:{title})"),
    "instrument": ("instrument: {name} for the first voice (%%MIDI program {program})",
                   "for {name} (add %%MIDI program {program})", "played on the {name} (%%MIDI program {program})"),
    "range": ("range: every note between {low} and {high} (C4 is middle C)",
              "no note below {low} or above {high} (C4 = middle C)", "keep every note within {low} to {high} (middle C is C4)"),
    "voices2": ("voices: 2 (V:1 and V:2, both playing)", "in two voices, V:1 and V:2, both playing",
                "for two parts: a melody in V:1 and a second voice in V:2"),
    "voices1": ("voices: 1", "a single melody line (one voice)", "one voice only"),
}
MODE_FIELDS = {"major": "", "minor": "m", "dorian": "dor", "mixolydian": "mix"}


def combination(tonic: str, mode: str, meter: str) -> str:
    return f"{tonic} {mode}|{meter}"


@lru_cache(maxsize=8)
def combinations(split: str, eval_percent: int) -> tuple[tuple[str, str, str], ...]:
    """The (tonic, mode, meter) triples of a split: eval ones by the pair's stable hash, the rest train."""
    return tuple((t, m, meter) for t, m in KEYS for meter in METERS
                 if split_of("music-generated", combination(t, m, meter), eval_percent) == split)


def sample_constraints(rng: random.Random, tonic: str, mode: str, meter: str) -> dict[str, dict[str, Any]]:
    """One prompt's constraints: key, meter and bars always, the others by `OPTIONAL`'s chances."""
    constraints: dict[str, dict[str, Any]] = {"key": {"tonic": tonic, "mode": mode}, "meter": {"meter": meter},
                                              "bars": {"bars": rng.choice(BARS)}}
    chosen = {kind for kind, chance in OPTIONAL.items() if rng.random() < chance}
    if "tempo" in chosen:
        beat = "3/8" if meter in ("6/8", "9/8") else ("1/2" if meter == "2/2" and rng.random() < 0.5 else "1/4")
        constraints["tempo"] = {"beat": beat, "bpm": rng.choice(BPM[beat])}
    if "title" in chosen:
        constraints["title"] = {"title": f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"}
    if "instrument" in chosen:
        program, name = rng.choice(INSTRUMENTS)
        constraints["instrument"] = {"program": program, "name": name}
    voices = (2 if rng.random() < 0.75 else 1) if "voices" in chosen else 1
    if "voices" in chosen:
        constraints["voices"] = {"voices": voices}
    if "range" in chosen:
        spans = RANGES_TWO if voices == 2 else RANGES_ONE
        constraints["range"] = {"low": rng.choice(spans["low"]), "high": rng.choice(spans["high"])}
    return {kind: constraints[kind] for kind in sorted(constraints)}


def canonical(constraints: dict[str, dict[str, Any]]) -> str:
    return json.dumps(constraints, sort_keys=True, separators=(",", ":"))


def phrase(constraints: dict[str, dict[str, Any]], rng: random.Random) -> str:
    """The prompt in one of several wordings: a list of lines or one sentence, the lines in a drawn order."""
    as_list, parts = rng.random() < 0.6, []
    for kind, spec in constraints.items():
        if kind == "key":
            spec = {**spec, "field": f"{spec['tonic']}{MODE_FIELDS[spec['mode']]}"}
        options = PHRASES[f"voices{spec['voices']}"] if kind == "voices" else PHRASES[kind]
        if not as_list:  # a sentence takes no "label: value" lines
            options = tuple(o for o in options if not re.match(r"\w+: ", o))
        parts.append(rng.choice(options).format(**spec))
    first = [p for p, kind in zip(parts, constraints) if kind == "key"]
    rest = [p for p, kind in zip(parts, constraints) if kind != "key"]
    rng.shuffle(rest)
    parts = first + rest if rng.random() < 0.7 else rest + first
    intro, outro = rng.choice(INTROS), rng.choice(OUTROS)
    if as_list:
        return intro + "\n" + "\n".join(f"- {p}" for p in parts) + "\n" + outro
    return f"{intro} It should be {'; '.join(parts)}. {outro}"


def generated_rows(split: str, n: int, seed: int, eval_percent: int) -> list[dict[str, Any]]:
    """The first `n` prompt rows of a split ({"id", "constraints", "text", "combination"}), all distinct."""
    if n > MAX_N:
        raise ValueError(f"generated music prompts: asked for {n}, at most {MAX_N} (pass -n / eval.size / train_size)")
    pool = combinations(split, eval_percent)
    if not pool:
        return []
    rng = random.Random(f"music-generated|{split}" + (f"|{seed}" if split == "train" else ""))
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    misses = 0
    while len(rows) < n and misses < 1000:
        tonic, mode, meter = rng.choice(pool)
        constraints = sample_constraints(rng, tonic, mode, meter)
        text = canonical(constraints)
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest in seen:
            misses += 1
            continue
        seen.add(digest)
        rows.append({"id": f"music-gen-{digest[:12]}", "constraints": constraints,
                     "text": phrase(constraints, random.Random(digest)), "combination": combination(tonic, mode, meter)})
    return rows
